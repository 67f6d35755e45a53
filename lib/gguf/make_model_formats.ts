/**
 * Chat formats for the generated test models (`make-model --chat-format NAME`): each family's
 * Jinja chat template, written here from the published formats (Llama 3.1 Instruct with custom
 * tools, Hermes 2 Pro / Qwen2.5 / Qwen3, Mistral 7B Instruct v0.3, Qwen3-Coder; the agent
 * families gpt-oss, GLM, Kimi-K2 and MiniMax-M2 in `agent_templates.ts`), and the family's
 * marker strings, which become single tokens by renaming unused `<|reserved_special_token_N|>`
 * entries of the Llama-3 vocab. Markers the real models print as text (`<tool_call>`, `[TOOL_CALLS]`,
 * `<think>`, ...) are typed as user-defined tokens (GGUF token type 4): llama.cpp then tokenizes
 * them whole and `token_to_piece` prints them without `special`, so a model's output of a marker
 * is one token whose text the reply parser sees. Turn delimiters (`<|im_start|>`, `<|im_end|>`,
 * `<|eom_id|>`) stay control tokens (type 3), as in the real models; `<|im_end|>` and `<|eom_id|>`
 * end generation (llama.cpp recognises them by their text).
 *
 * @example
 * ```ts
 * import { applyChatFormat } from "./make_model_formats.ts";
 * // tokenizer: the `tokenizer.*` KVs of the Llama-3 vocab, as a Map
 * // applyChatFormat(tokenizer, "hermes"); // renames tokens, sets tokenizer.chat_template
 * ```
 * @module
 */
import { type GgufKv, GgufType, kvString, kvU32 } from "./types.ts";
import {
  GLM_TOOLS_TEMPLATE,
  HARMONY_TOOLS_TEMPLATE,
  KIMI_K2_TOOLS_TEMPLATE,
  MINIMAX_M2_TOOLS_TEMPLATE,
} from "./agent_templates.ts";
import {
  DEEPSEEK_V32_TOOLS_TEMPLATE,
  DEEPSEEK_V3_TOOLS_TEMPLATE,
  DEEPSEEK_V4_TOOLS_TEMPLATE,
  DEVSTRAL_TOOLS_TEMPLATE,
  GEMMA4_TOOLS_TEMPLATE,
} from "./family_templates.ts";

/** Families `make-model --chat-format` can write. */
export const CHAT_FORMATS = [
  "llama3",
  "hermes",
  "mistral",
  "qwen3-coder",
  "harmony",
  "glm",
  "kimi-k2",
  "minimax-m2",
  "deepseek-v3",
  "deepseek-v3.2",
  "deepseek-v4",
  "gemma4",
  "devstral",
] as const;
export type ChatFormatName = (typeof CHAT_FORMATS)[number];

/** GGUF token types (`enum llama_token_type`). */
const CONTROL = 3;
const USER_DEFINED = 4;

/** A marker and the token type it gets. */
type Marker = { text: string; type: number };

const md = (text: string): Marker => ({ text, type: USER_DEFINED });
const ctl = (text: string): Marker => ({ text, type: CONTROL });

const CHATML = [ctl("<|im_start|>"), ctl("<|im_end|>")];
const DEEPSEEK_TURNS = [ctl("<｜User｜>"), ctl("<｜Assistant｜>"), ctl("<｜end▁of▁sentence｜>")];
const DSML_TAGS = [
  md('<｜DSML｜invoke name="'),
  md("</｜DSML｜invoke>"),
  md('<｜DSML｜parameter name="'),
  md("</｜DSML｜parameter>"),
  md("<think>"),
  md("</think>"),
];

/** The `llama3` chat template (Jinja; `\\n` inside strings are Jinja escapes). */
export const LLAMA31_TOOLS_TEMPLATE: string = String
  .raw`{#- Llama 3.1 Instruct with custom tools: the tools as JSON in the first user turn, a call as the
    whole assistant turn {"name": .., "parameters": ..} (several joined by "; "), results in an
    ipython turn. <|python_tag|> opens built-in tool calls, which end with <|eom_id|>. -#}
{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- if messages[0].role == 'system' %}
    {%- set system_message = messages[0].content | trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- if tools_in_user_message and tools is not none and messages | length > 0 and messages[0].role == 'user' %}
    {%- set first_user_message = messages[0].content | trim %}
    {%- set messages = messages[1:] %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' }}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>" }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'assistant' and message.tool_calls %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
        {%- for call in message.tool_calls %}
            {%- set tool_call = call.function %}
            {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
                {{- "<|python_tag|>" + tool_call.name + ".call(" }}
                {%- for arg_name, arg_val in tool_call.arguments | items %}
                    {{- arg_name + '="' + arg_val + '"' }}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- ")" }}
            {%- else %}
                {%- if not loop.first %}
                    {{- "; " }}
                {%- endif %}
                {{- '{"name": "' + tool_call.name + '", "parameters": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- "}" }}
            {%- endif %}
        {%- endfor %}
        {%- if builtin_tools is defined %}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == 'tool' or message.role == 'ipython' %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- else %}
        {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\n\n' + (message.content or '') | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
`;

/** The `hermes` chat template (Jinja; `\\n` inside strings are Jinja escapes). */
export const HERMES_TOOLS_TEMPLATE: string = String
  .raw`{#- Hermes 2 Pro / Qwen2.5 / Qwen3 (ChatML): tools as JSON lines inside <tools></tools> in the system
    turn, calls as <tool_call>{"name", "arguments"}</tool_call>, results as <tool_response> blocks in a
    user turn, Qwen3 <think> reasoning (kept only after the last user query, enable_thinking). -#}
{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(last_query=-1) %}
{%- for message in messages %}
    {%- if message.role == 'user' %}
        {%- set ns.last_query = loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content or '' %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {{- '<|im_start|>assistant\n' }}
        {%- if message.reasoning_content and loop.index0 > ns.last_query %}
            {{- '<think>\n' + message.reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
        {%- else %}
            {{- content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' + tool_call.name + '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
`;

/** The `mistral` chat template (Jinja; `\\n` inside strings are Jinja escapes). */
export const MISTRAL_V3_TOOLS_TEMPLATE: string = String
  .raw`{#- Mistral 7B Instruct v0.3: [AVAILABLE_TOOLS] before the last user turn, calls as
    [TOOL_CALLS] [{"name", "arguments", "id"}], results as [TOOL_RESULTS] {"content", "call_id"}. -#}
{%- if messages[0].role == 'system' %}
    {%- set system_message = messages[0].content %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr('role', 'equalto', 'user') | list %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message.role == 'user' %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool | items %}
                    {%- if key != 'return' %}
                        {%- if val is string %}
                            {{- '"' + key + '": ' + val | tojson }}
                        {%- else %}
                            {{- '"' + key + '": ' + val | tojson }}
                        {%- endif %}
                        {%- if not loop.last %}
                            {{- ", " }}
                        {%- endif %}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
        {%- endif %}
        {%- if message == user_messages[-1] and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message.content + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message.content + "[/INST]" }}
        {%- endif %}
    {%- elif message.role == 'assistant' and message.tool_calls %}
        {%- if message.content %}
            {{- " " + message.content | trim }}
        {%- endif %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function | tojson %}
            {{- out[:-1] }}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message.role == 'assistant' %}
        {{- " " + (message.content or '') | trim + eos_token }}
    {%- elif message.role == 'tool' or message.role == 'tool_results' %}
        {{- '[TOOL_RESULTS] {"content": ' + message.content | tojson + ', "call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception('Only user, assistant and tool roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
`;

/** The `qwen3-coder` chat template (Jinja; `\\n` inside strings are Jinja escapes). */
export const QWEN3_CODER_TOOLS_TEMPLATE: string = String
  .raw`{#- Qwen3-Coder (ChatML): tools as <function><name>..</name><parameters>..</parameters></function>
    inside <tools>, calls as <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n
    </function>\n</tool_call> (strings raw, other values as JSON), results as <tool_response> in a
    user turn. -#}
{%- if messages[0].role == 'system' %}
    {%- set system_message = messages[0].content %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = [] %}
{%- endif %}
{%- if system_message is defined %}
    {{- '<|im_start|>system\n' + system_message }}
{%- elif tools | length > 0 %}
    {{- '<|im_start|>system\nYou are Qwen, a helpful AI assistant that can interact with a computer to solve tasks.' }}
{%- endif %}
{%- if tools | length > 0 %}
    {{- '\n\n# Tools\n\nYou have access to the following functions:\n\n<tools>' }}
    {%- for tool in tools %}
        {%- if tool.function is defined %}
            {%- set tool = tool.function %}
        {%- endif %}
        {{- '\n<function>\n<name>' ~ tool.name ~ '</name>' }}
        {%- if tool.description is defined %}
            {{- '\n<description>' ~ (tool.description | trim) ~ '</description>' }}
        {%- endif %}
        {{- '\n<parameters>' }}
        {%- if tool.parameters is defined and tool.parameters is mapping and tool.parameters.properties is defined and tool.parameters.properties is mapping %}
            {%- for param_name, param_fields in tool.parameters.properties | items %}
                {{- '\n<parameter>\n<name>' ~ param_name ~ '</name>' }}
                {%- if param_fields.type is defined %}
                    {{- '\n<type>' ~ (param_fields.type | string) ~ '</type>' }}
                {%- endif %}
                {%- if param_fields.description is defined %}
                    {{- '\n<description>' ~ (param_fields.description | trim) ~ '</description>' }}
                {%- endif %}
                {%- for key, val in param_fields | items %}
                    {%- if key not in ['name', 'type', 'description'] %}
                        {{- '\n<' ~ key ~ '>' ~ (val | tojson if val is mapping or val is sequence and val is not string else val | string) ~ '</' ~ key ~ '>' }}
                    {%- endif %}
                {%- endfor %}
                {{- '\n</parameter>' }}
            {%- endfor %}
            {%- if tool.parameters.required is defined %}
                {{- '\n<required>' ~ (tool.parameters.required | tojson) ~ '</required>' }}
            {%- endif %}
        {%- endif %}
        {{- '\n</parameters>\n</function>' }}
    {%- endfor %}
    {{- '\n</tools>' }}
    {{- '\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>' }}
{%- endif %}
{%- if system_message is defined or tools | length > 0 %}
    {{- '<|im_end|>\n' }}
{%- endif %}
{%- for message in loop_messages %}
    {%- set content = message.content or '' %}
    {%- if message.role == 'assistant' and message.tool_calls %}
        {{- '<|im_start|>assistant' }}
        {%- if content | trim | length > 0 %}
            {{- '\n' + content | trim + '\n' }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n<function=' + tool_call.name + '>\n' }}
            {%- if tool_call.arguments is defined and tool_call.arguments is mapping %}
                {%- for args_name, args_value in tool_call.arguments | items %}
                    {{- '<parameter=' + args_name + '>\n' }}
                    {%- if args_value is string %}
                        {{- args_value }}
                    {%- else %}
                        {{- args_value | tojson }}
                    {%- endif %}
                    {{- '\n</parameter>\n' }}
                {%- endfor %}
            {%- endif %}
            {{- '</function>\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'user' or message.role == 'system' or message.role == 'assistant' %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or loop_messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user\n' }}
        {%- endif %}
        {{- '<tool_response>\n' + content + '\n</tool_response>\n' }}
        {%- if loop.last or loop_messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
`;

/** Each family's template, marker tokens, and the turn end that is its EOS (ChatML: `<|im_end|>`). */
export const CHAT_FORMAT_SPECS: Readonly<
  Record<ChatFormatName, { template: string; markers: Marker[]; eos?: string }>
> = {
  // Llama 3.1's own ids: <|eom_id|> is 128008 (reserved 4), <|python_tag|> 128010 (reserved 5).
  llama3: {
    template: LLAMA31_TOOLS_TEMPLATE,
    markers: [ctl("<|eom_id|>"), md("<|python_tag|>")],
  },
  hermes: {
    template: HERMES_TOOLS_TEMPLATE,
    markers: [
      ...CHATML,
      md("<tool_call>"),
      md("</tool_call>"),
      md("<tool_response>"),
      md("</tool_response>"),
      md("<think>"),
      md("</think>"),
    ],
    eos: "<|im_end|>",
  },
  mistral: {
    template: MISTRAL_V3_TOOLS_TEMPLATE,
    markers: [
      md("[INST]"),
      md("[/INST]"),
      md("[TOOL_CALLS]"),
      md("[AVAILABLE_TOOLS]"),
      md("[/AVAILABLE_TOOLS]"),
      md("[TOOL_RESULTS]"),
      md("[/TOOL_RESULTS]"),
    ],
  },
  "qwen3-coder": {
    template: QWEN3_CODER_TOOLS_TEMPLATE,
    markers: [
      ...CHATML,
      md("<tool_call>"),
      md("</tool_call>"),
      md("<tool_response>"),
      md("</tool_response>"),
      md("<think>"),
      md("</think>"),
    ],
    eos: "<|im_end|>",
  },
  // gpt-oss: llama.cpp prints <|start|>, <|channel|>, <|message|>, <|constrain|> and <|end|>
  // (it makes them user-defined), <|return|> and <|call|> end generation.
  harmony: {
    template: HARMONY_TOOLS_TEMPLATE,
    markers: [
      md("<|start|>"),
      md("<|channel|>"),
      md("<|message|>"),
      md("<|constrain|>"),
      md("<|end|>"),
      ctl("<|return|>"),
      ctl("<|call|>"),
    ],
    eos: "<|return|>",
  },
  glm: {
    template: GLM_TOOLS_TEMPLATE,
    markers: [
      ctl("[gMASK]"),
      ctl("<sop>"),
      ctl("<|system|>"),
      ctl("<|user|>"),
      ctl("<|assistant|>"),
      ctl("<|observation|>"),
      md("<tool_call>"),
      md("</tool_call>"),
      md("<arg_key>"),
      md("</arg_key>"),
      md("<arg_value>"),
      md("</arg_value>"),
      md("<tool_response>"),
      md("</tool_response>"),
      md("<think>"),
      md("</think>"),
    ],
    eos: "<|user|>",
  },
  "kimi-k2": {
    template: KIMI_K2_TOOLS_TEMPLATE,
    markers: [
      ctl("<|im_user|>"),
      ctl("<|im_assistant|>"),
      ctl("<|im_system|>"),
      ctl("<|im_middle|>"),
      ctl("<|im_end|>"),
      md("<|tool_calls_section_begin|>"),
      md("<|tool_calls_section_end|>"),
      md("<|tool_call_begin|>"),
      md("<|tool_call_argument_begin|>"),
      md("<|tool_call_end|>"),
      md("<think>"),
      md("</think>"),
    ],
    eos: "<|im_end|>",
  },
  "minimax-m2": {
    template: MINIMAX_M2_TOOLS_TEMPLATE,
    markers: [
      ctl("]~!b["),
      ctl("]~b]"),
      ctl("[e~["),
      md("<minimax:tool_call>"),
      md("</minimax:tool_call>"),
      md("<think>"),
      md("</think>"),
    ],
    eos: "[e~[",
  },
  // DeepSeek V3.1: the turn markers and the sentence end are control tokens, the call markers
  // are printed.
  "deepseek-v3": {
    template: DEEPSEEK_V3_TOOLS_TEMPLATE,
    markers: [
      ctl("<｜User｜>"),
      ctl("<｜Assistant｜>"),
      ctl("<｜end▁of▁sentence｜>"),
      md("<｜tool▁calls▁begin｜>"),
      md("<｜tool▁calls▁end｜>"),
      md("<｜tool▁call▁begin｜>"),
      md("<｜tool▁call▁end｜>"),
      md("<｜tool▁sep｜>"),
      md("<｜tool▁output▁begin｜>"),
      md("<｜tool▁output▁end｜>"),
      md("<think>"),
      md("</think>"),
    ],
    eos: "<｜end▁of▁sentence｜>",
  },
  // DeepSeek V3.2 / V4: as V3.1, the DSML block tags printed (one token each here).
  "deepseek-v3.2": {
    template: DEEPSEEK_V32_TOOLS_TEMPLATE,
    markers: [
      ...DEEPSEEK_TURNS,
      md("<｜DSML｜function_calls>"),
      md("</｜DSML｜function_calls>"),
      ...DSML_TAGS,
    ],
    eos: "<｜end▁of▁sentence｜>",
  },
  "deepseek-v4": {
    template: DEEPSEEK_V4_TOOLS_TEMPLATE,
    markers: [
      ...DEEPSEEK_TURNS,
      md("<｜DSML｜tool_calls>"),
      md("</｜DSML｜tool_calls>"),
      ...DSML_TAGS,
    ],
    eos: "<｜end▁of▁sentence｜>",
  },
  gemma4: {
    template: GEMMA4_TOOLS_TEMPLATE,
    markers: [
      ctl("<|turn>"),
      ctl("<turn|>"),
      md("<|tool>"),
      md("<tool|>"),
      md("<|tool_call>"),
      md("<tool_call|>"),
      // After its calls the model writes <|tool_response> and waits: llama.cpp ends generation
      // there (a control token).
      ctl("<|tool_response>"),
      md("<tool_response|>"),
      md('<|"|>'),
      md("<|channel>"),
      md("<channel|>"),
      md("<|think|>"),
    ],
    eos: "<turn|>",
  },
  devstral: {
    template: DEVSTRAL_TOOLS_TEMPLATE,
    markers: [
      md("[SYSTEM_PROMPT]"),
      md("[/SYSTEM_PROMPT]"),
      md("[INST]"),
      md("[/INST]"),
      md("[AVAILABLE_TOOLS]"),
      md("[/AVAILABLE_TOOLS]"),
      md("[TOOL_CALLS]"),
      md("[ARGS]"),
      md("[TOOL_RESULTS]"),
      md("[/TOOL_RESULTS]"),
    ],
  },
};

/** Reserved tokens taken for markers, in order (llama3 keeps Llama 3.1's ids, see above). */
function reservedFor(format: ChatFormatName, i: number): string {
  const n = format === "llama3" ? [4, 5][i] : 10 + i;
  return `<|reserved_special_token_${n}|>`;
}

/**
 * Rewrites the `tokenizer.*` KVs in place for `format`: marker tokens (new arrays, so a cached
 * vocab is not touched), the chat template, and for ChatML families EOS/EOT `<|im_end|>`.
 */
/**
 * `controlMarkers`: type every marker as a control token, as some real vocabularies do (GLM,
 * Kimi): the engine must then print the family's markers itself for its parsers to see them.
 */
export function applyChatFormat(
  tokenizer: Map<string, GgufKv>,
  format: ChatFormatName,
  opts: { controlMarkers?: boolean } = {},
): void {
  const spec = CHAT_FORMAT_SPECS[format];
  const tokensKv = tokenizer.get("tokenizer.ggml.tokens");
  const typesKv = tokenizer.get("tokenizer.ggml.token_type");
  if (
    tokensKv?.type !== GgufType.ARRAY || tokensKv.itemType !== GgufType.STRING ||
    typesKv?.type !== GgufType.ARRAY || typesKv.itemType !== GgufType.INT32
  ) {
    throw new Error("vocab has no tokenizer.ggml.tokens / token_type arrays");
  }
  const tokens = Array.from(tokensKv.value as ArrayLike<string>);
  const types = Int32Array.from(typesKv.value as ArrayLike<number>);
  spec.markers.forEach((m, i) => {
    const at = tokens.indexOf(reservedFor(format, i));
    if (at < 0) throw new Error(`vocab has no ${reservedFor(format, i)} for ${m.text}`);
    if (tokens.includes(m.text)) throw new Error(`vocab already has ${m.text}`);
    tokens[at] = m.text;
    types[at] = opts.controlMarkers ? CONTROL : m.type;
  });
  tokenizer.set("tokenizer.ggml.tokens", { ...tokensKv, value: tokens });
  tokenizer.set("tokenizer.ggml.token_type", { ...typesKv, value: types });
  tokenizer.set("tokenizer.chat_template", kvString(spec.template));
  if (spec.eos) {
    const eos = tokens.indexOf(spec.eos);
    tokenizer.set("tokenizer.ggml.eos_token_id", kvU32(eos));
    tokenizer.set("tokenizer.ggml.eot_token_id", kvU32(eos));
  }
}
