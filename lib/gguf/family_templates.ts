/**
 * Chat templates of DeepSeek V3.1, Gemma 4 and Devstral for the generated test models
 * (`make-model --chat-format deepseek-v3|gemma4|devstral`), written here from the published
 * formats and shortened to what a tool round trip needs: DeepSeek V3.1 (`<｜tool▁calls▁begin｜>`
 * sections of `NAME<｜tool▁sep｜>{json}` calls, `<think>` opened by the generation prompt when
 * `thinking` is on, no tool list: Hearth adds it to the system message), Gemma 4
 * (`<|tool_call>call:NAME{key:value}<tool_call|>` in Gemma's value notation, the thought channel,
 * `reasoning_content` passed back on a turn with calls), Devstral (`[TOOL_CALLS]NAME[ARGS]{..}`)
 * and DeepSeek V3.2 / V4 (DSML, `make-model --chat-format deepseek-v3.2|deepseek-v4`).
 * The real templates live in llama.cpp's `models/templates/`; the tests serve those too.
 *
 * @example
 * ```ts
 * import { GEMMA4_TOOLS_TEMPLATE } from "./family_templates.ts";
 * GEMMA4_TOOLS_TEMPLATE.includes("<|tool_call>call:"); // true
 * ```
 * @module
 */

/** DeepSeek V3.1. */
export const DEEPSEEK_V3_TOOLS_TEMPLATE: string = String
  .raw`{#- DeepSeek V3.1: system text first, then <｜User｜> / <｜Assistant｜> turns; calls chained in one
    <｜tool▁calls▁begin｜> section, results as <｜tool▁output▁begin｜> blocks. -#}
{%- set ns = namespace(system='', last_user=false, tool=false) %}
{%- for m in messages if m.role == 'system' %}
    {%- set ns.system = ns.system + ('\n\n' if ns.system else '') + m.content %}
{%- endfor %}
{{- bos_token + ns.system }}
{%- for m in messages %}
    {%- if m.role == 'user' %}
        {{- '<｜User｜>' + m.content }}
        {%- set ns.last_user = true %}
        {%- set ns.tool = false %}
    {%- elif m.role == 'assistant' %}
        {%- if ns.last_user %}
            {{- '<｜Assistant｜><think></think>' }}
        {%- endif %}
        {%- set ns.last_user = false %}
        {%- set ns.tool = false %}
        {{- m.content or '' }}
        {%- if m.tool_calls %}
            {{- '<｜tool▁calls▁begin｜>' }}
            {%- for tc in m.tool_calls %}
                {%- set args = tc.function.arguments %}
                {{- '<｜tool▁call▁begin｜>' + tc.function.name + '<｜tool▁sep｜>' + (args if args is string else args | tojson) + '<｜tool▁call▁end｜>' }}
            {%- endfor %}
            {{- '<｜tool▁calls▁end｜>' }}
        {%- endif %}
        {{- '<｜end▁of▁sentence｜>' }}
    {%- elif m.role == 'tool' %}
        {{- '<｜tool▁output▁begin｜>' + m.content + '<｜tool▁output▁end｜>' }}
        {%- set ns.last_user = false %}
        {%- set ns.tool = true %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt and ns.last_user %}
    {{- '<｜Assistant｜>' + ('<think>' if thinking is defined and thinking else '<think></think>') }}
{%- endif %}
`;

/** Gemma 4. */
export const GEMMA4_TOOLS_TEMPLATE: string = String
  .raw`{#- Gemma 4: <|turn>ROLE ... <turn|> turns, tool declarations in the system turn, calls as
    <|tool_call>call:NAME{key:value}<tool_call|> with strings quoted <|"|>, results as
    <|tool_response>response:NAME{value:..}<tool_response|>, reasoning on the thought channel. -#}
{%- macro arg(v) -%}
    {%- if v is string -%}{{- '<|"|>' + v + '<|"|>' -}}
    {%- elif v is boolean -%}{{- 'true' if v else 'false' -}}
    {%- elif v is none -%}{{- 'null' -}}
    {%- elif v is mapping -%}
        {{- '{' -}}{%- for k, x in v | dictsort -%}{{- k + ':' + arg(x) -}}{{- ',' if not loop.last -}}{%- endfor -%}{{- '}' -}}
    {%- elif v is sequence -%}
        {{- '[' -}}{%- for x in v -%}{{- arg(x) -}}{{- ',' if not loop.last -}}{%- endfor -%}{{- ']' -}}
    {%- else -%}{{- v -}}
    {%- endif -%}
{%- endmacro -%}
{{- bos_token -}}
{%- set loop_messages = messages -%}
{%- if tools or messages[0].role == 'system' -%}
    {{- '<|turn>system\n' -}}
    {%- if enable_thinking is defined and enable_thinking -%}{{- '<|think|>' -}}{%- endif -%}
    {%- if messages[0].role == 'system' -%}
        {{- messages[0].content | trim -}}
        {%- set loop_messages = messages[1:] -%}
    {%- endif -%}
    {%- for t in tools or [] -%}
        {{- '<|tool>declaration:' + t.function.name + t.function.parameters | tojson + '<tool|>' -}}
    {%- endfor -%}
    {{- '<turn|>\n' -}}
{%- endif -%}
{%- set ns = namespace(open=false) -%}
{%- for m in loop_messages -%}
    {%- if m.role == 'tool' -%}
        {{- '<|tool_response>response:' + (m.name or 'unknown') + '{value:' + arg(m.content) + '}<tool_response|>' -}}
    {%- else -%}
        {%- if ns.open -%}{{- '<turn|>\n' -}}{%- endif -%}
        {{- '<|turn>' + ('model' if m.role == 'assistant' else m.role) + '\n' -}}
        {%- if m.role == 'assistant' and m.tool_calls and m.reasoning_content -%}
            {{- '<|channel>thought\n' + m.reasoning_content + '\n<channel|>' -}}
        {%- endif -%}
        {%- for tc in m.tool_calls or [] -%}
            {{- '<|tool_call>call:' + tc.function.name + arg(tc.function.arguments) + '<tool_call|>' -}}
        {%- endfor -%}
        {{- (m.content or '') | trim -}}
        {%- set ns.open = true -%}
    {%- endif -%}
{%- endfor -%}
{%- if ns.open -%}{{- '<turn|>\n' -}}{%- endif -%}
{%- if add_generation_prompt -%}
    {{- '<|turn>model\n' -}}
    {%- if not (enable_thinking is defined and enable_thinking) -%}
        {{- '<|channel>thought\n<channel|>' -}}
    {%- endif -%}
{%- endif -%}
`;

/** Devstral (the newer Mistral call syntax). */
export const DEVSTRAL_TOOLS_TEMPLATE: string = String
  .raw`{#- Devstral: [SYSTEM_PROMPT], the tools as JSON in [AVAILABLE_TOOLS], [INST] user turns, each call as
    [TOOL_CALLS]NAME[ARGS]{json} after the assistant's text, results in [TOOL_RESULTS]. -#}
{{- bos_token }}
{%- if messages[0].role == 'system' %}
    {{- '[SYSTEM_PROMPT]' + messages[0].content + '[/SYSTEM_PROMPT]' }}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if tools %}
    {{- '[AVAILABLE_TOOLS]' + tools | tojson + '[/AVAILABLE_TOOLS]' }}
{%- endif %}
{%- for m in loop_messages %}
    {%- if m.role == 'user' %}
        {{- '[INST]' + m.content + '[/INST]' }}
    {%- elif m.role == 'assistant' %}
        {{- m.content or '' }}
        {%- for tc in m.tool_calls or [] %}
            {%- set args = tc.function.arguments %}
            {{- '[TOOL_CALLS]' + tc.function.name + '[ARGS]' + (args if args is string else args | tojson) }}
        {%- endfor %}
        {{- eos_token }}
    {%- elif m.role == 'tool' %}
        {{- '[TOOL_RESULTS]' + m.content + '[/TOOL_RESULTS]' }}
    {%- endif %}
{%- endfor %}
`;

/**
 * DeepSeek V3.2 (`block` `function_calls`, results in `<function_results>`) and V4
 * (`tool_calls`, results as `<tool_result>` user turns): DSML calls, one
 * `<｜DSML｜parameter name=K string="true|false">` per argument (strings raw, the rest JSON), the
 * tools as JSON in the system text, `<think>` opened by the generation prompt when `thinking` is
 * on and the reasoning of the turns after the last user message passed back.
 */
function dsmlTemplate(block: string, v4: boolean): string {
  const d = "｜DSML｜";
  const results = v4
    ? String
      .raw`{{- ('\n\n' if ns.in_user else '<｜User｜>') + '<tool_result>' + m.content + '</tool_result>' }}
        {%- set ns.in_user = true %}`
    : String
      .raw`{{- '\n\n<function_results>\n<result>' + m.content + '</result>\n</function_results>' }}
        {%- set ns.in_user = false %}`;
  return String.raw`{#- DeepSeek ${v4 ? "V4" : "V3.2"}: DSML calls in a <${d}${block}> block. -#}
{%- set think = thinking is defined and thinking %}
{%- set ns = namespace(system='', last_user=-1, in_user=false) %}
{%- for m in messages if m.role == 'system' %}
    {%- set ns.system = ns.system + ('\n\n' if ns.system else '') + m.content %}
{%- endfor %}
{%- if tools %}
    {%- set ns.system = ns.system + ('\n\n' if ns.system else '') + '## Tools\nCall tools in a <${d}${block}> block of <${d}invoke name="NAME"> with <${d}parameter name="K" string="true|false">V</${d}parameter>.\n<functions>\n' %}
    {%- for t in tools %}
        {%- set ns.system = ns.system + (t.function | tojson) + '\n' %}
    {%- endfor %}
    {%- set ns.system = ns.system + '</functions>\n' %}
{%- endif %}
{{- bos_token + ns.system }}
{%- for m in messages %}
    {%- if m.role == 'user' %}{%- set ns.last_user = loop.index0 %}{%- endif %}
{%- endfor %}
{%- for m in messages %}
    {%- if m.role == 'user' %}
        {{- ('\n\n' if ns.in_user else '<｜User｜>') + m.content }}
        {%- set ns.in_user = true %}
    {%- elif m.role == 'assistant' %}
        {{- '<｜Assistant｜>' if ns.in_user else '\n\n' }}
        {%- set ns.in_user = false %}
        {%- if think and loop.index0 > ns.last_user %}
            {{- '<think>' + (m.reasoning_content or '') + '</think>' }}
        {%- else %}
            {{- '</think>' }}
        {%- endif %}
        {{- m.content or '' }}
        {%- if m.tool_calls %}
            {{- '\n\n<${d}${block}>\n' }}
            {%- for tc in m.tool_calls %}
                {%- set args = tc.function.arguments %}
                {%- if args is string %}{%- set args = args | from_json %}{%- endif %}
                {{- '<${d}invoke name="' + tc.function.name + '">\n' }}
                {%- for k, v in args.items() %}
                    {{- '<${d}parameter name="' + k + '" string="' + ('true' if v is string else 'false') + '">' + (v if v is string else v | tojson) + '</${d}parameter>\n' }}
                {%- endfor %}
                {{- '</${d}invoke>\n' }}
            {%- endfor %}
            {{- '</${d}${block}>' }}
        {%- endif %}
        {{- '<｜end▁of▁sentence｜>' }}
    {%- elif m.role == 'tool' %}
        ${results}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<｜Assistant｜>' if ns.in_user else '\n\n' }}
    {{- '<think>' if think else '${v4 ? "</think>" : "<think></think>"}' }}
{%- endif %}
`;
}

/** DeepSeek V3.2. */
export const DEEPSEEK_V32_TOOLS_TEMPLATE: string = dsmlTemplate("function_calls", false);

/** DeepSeek V4 (and V4-Flash, whose template differs only in its reasoning-effort texts). */
export const DEEPSEEK_V4_TOOLS_TEMPLATE: string = dsmlTemplate("tool_calls", true);
