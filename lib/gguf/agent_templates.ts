/**
 * Chat templates of the agent-model families for the generated test models
 * (`make-model --chat-format harmony|glm|kimi-k2|minimax-m2`), written here from the published
 * formats, shortened to what a tool round trip needs: gpt-oss's Harmony (channels, recipients,
 * `<|call|>`), GLM-4.6 (`<tool_call>NAME` with `<arg_key>`/`<arg_value>` pairs), Kimi-K2
 * (`<|tool_calls_section_begin|>`, ids `functions.NAME:IDX`) and MiniMax-M2
 * (`<minimax:tool_call>` with `<invoke name=..>`). Each passes reasoning back the way its model
 * does (`thinking` for gpt-oss, `reasoning_content` for the others). The real templates live in
 * llama.cpp's `models/templates/`; the tests serve those too.
 *
 * @example
 * ```ts
 * import { GLM_TOOLS_TEMPLATE } from "./agent_templates.ts";
 * GLM_TOOLS_TEMPLATE.includes("<arg_key>"); // true
 * ```
 * @module
 */

/** gpt-oss (Harmony). */
export const HARMONY_TOOLS_TEMPLATE: string = String
  .raw`{#- gpt-oss (OpenAI Harmony): tools as a functions namespace in the developer message; the reply is
    messages on channels (analysis: reasoning, final: answer), a call is a commentary message to
    functions.NAME ending with <|call|>, a result comes from functions.NAME to=assistant. -#}
{{- '<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\nReasoning: ' }}
{{- reasoning_effort if reasoning_effort is defined else 'medium' }}
{{- '\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.' }}
{%- if tools %}
    {{- "\nCalls to these tools must go to the commentary channel: 'functions'." }}
{%- endif %}
{{- '<|end|>' }}
{%- if messages[0].role == 'system' or messages[0].role == 'developer' %}
    {%- set developer_message = messages[0].content %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set developer_message = '' %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if developer_message or tools %}
    {{- '<|start|>developer<|message|>' }}
    {%- if developer_message %}
        {{- '# Instructions\n\n' + developer_message + '\n\n' }}
    {%- endif %}
    {%- if tools %}
        {{- '# Tools\n\n## functions\n\nnamespace functions {\n\n' }}
        {%- for tool in tools %}
            {%- set tool = tool.function %}
            {{- '// ' + (tool.description or '') + '\ntype ' + tool.name + ' = (_: ' + tool.parameters | tojson + ') => any;\n\n' }}
        {%- endfor %}
        {{- '} // namespace functions' }}
    {%- endif %}
    {{- '<|end|>' }}
{%- endif %}
{%- set last = namespace(name=none) %}
{%- for message in loop_messages %}
    {%- if message.role == 'assistant' and message.tool_calls %}
        {%- if message.thinking %}
            {{- '<|start|>assistant<|channel|>analysis<|message|>' + message.thinking + '<|end|>' }}
        {%- endif %}
        {%- for tc in message.tool_calls %}
            {%- set tc = tc.function %}
            {{- '<|start|>assistant to=functions.' + tc.name + '<|channel|>commentary json<|message|>' }}
            {{- tc.arguments if tc.arguments is string else tc.arguments | tojson }}
            {{- '<|call|>' }}
            {%- set last.name = tc.name %}
        {%- endfor %}
    {%- elif message.role == 'assistant' %}
        {{- '<|start|>assistant<|channel|>final<|message|>' + (message.content or '') + '<|end|>' }}
    {%- elif message.role == 'tool' %}
        {{- '<|start|>functions.' + (last.name or message.name) + ' to=assistant<|channel|>commentary<|message|>' + message.content | tojson + '<|end|>' }}
    {%- elif message.role == 'user' %}
        {{- '<|start|>user<|message|>' + message.content + '<|end|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start|>assistant' }}
{%- endif %}
`;

/** GLM-4.6. */
export const GLM_TOOLS_TEMPLATE: string = String
  .raw`{#- GLM-4.6: tools as JSON lines inside <tools>, a call as <tool_call>NAME then one
    <arg_key>K</arg_key><arg_value>V</arg_value> pair per argument (strings raw, the rest JSON),
    results as <tool_response> in an <|observation|> turn, reasoning in <think></think>. -#}
{{- '[gMASK]<sop>' }}
{%- if tools %}
    {{- '<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' }}
    {%- for tool in tools %}
        {{- tool | tojson + '\n' }}
    {%- endfor %}
    {{- '</tools>\n\nFor each function call, output the function name and arguments within the following XML format:\n<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n...\n</tool_call>' }}
{%- endif %}
{%- set ns = namespace(last_user=-1) %}
{%- for m in messages %}
    {%- if m.role == 'user' %}
        {%- set ns.last_user = loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for m in messages %}
    {%- if m.role == 'user' %}
        {{- '<|user|>\n' + m.content }}
    {%- elif m.role == 'system' %}
        {{- '<|system|>\n' + m.content }}
    {%- elif m.role == 'assistant' %}
        {{- '<|assistant|>' }}
        {%- if loop.index0 > ns.last_user and m.reasoning_content %}
            {{- '\n<think>' + m.reasoning_content + '</think>' }}
        {%- else %}
            {{- '\n<think></think>' }}
        {%- endif %}
        {%- if m.content %}
            {{- '\n' + m.content }}
        {%- endif %}
        {%- for tc in m.tool_calls or [] %}
            {%- set tc = tc.function %}
            {{- '\n<tool_call>' + tc.name + '\n' }}
            {%- for k, v in tc.arguments | items %}
                {{- '<arg_key>' + k + '</arg_key>\n<arg_value>' + (v if v is string else v | tojson) + '</arg_value>\n' }}
            {%- endfor %}
            {{- '</tool_call>' }}
        {%- endfor %}
    {%- elif m.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|observation|>' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + m.content + '\n</tool_response>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|assistant|>' }}
{%- endif %}
`;

/** Kimi-K2 (Thinking). */
export const KIMI_K2_TOOLS_TEMPLATE: string = String
  .raw`{#- Kimi-K2: tools as JSON in a tool_declare system turn, calls in one
    <|tool_calls_section_begin|> section as <|tool_call_begin|>functions.NAME:IDX
    <|tool_call_argument_begin|>{JSON}<|tool_call_end|> (IDX counts calls), results as
    "## Return of <id>", reasoning in <think></think>. -#}
{%- if tools %}
    {{- '<|im_system|>tool_declare<|im_middle|>' + tools | tojson + '<|im_end|>' }}
{%- endif %}
{%- if messages | length == 0 or messages[0].role != 'system' %}
    {{- '<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>' }}
{%- endif %}
{%- set ids = namespace(queue=[], n=0) %}
{%- for m in messages %}
    {%- if m.role == 'user' %}
        {{- '<|im_user|>user<|im_middle|>' + m.content }}
    {%- elif m.role == 'assistant' %}
        {{- '<|im_assistant|>assistant<|im_middle|><think>' + (m.reasoning_content or '') + '</think>' + (m.content or '') }}
        {%- if m.tool_calls %}
            {{- '<|tool_calls_section_begin|>' }}
            {%- for tc in m.tool_calls %}
                {%- set id = 'functions.' + tc.function.name + ':' + ids.n | string %}
                {%- set ids.n = ids.n + 1 %}
                {%- set _ = ids.queue.append(id) %}
                {{- '<|tool_call_begin|>' + id + '<|tool_call_argument_begin|>' }}
                {{- tc.function.arguments if tc.function.arguments is string else tc.function.arguments | tojson }}
                {{- '<|tool_call_end|>' }}
            {%- endfor %}
            {{- '<|tool_calls_section_end|>' }}
        {%- endif %}
    {%- elif m.role == 'tool' %}
        {{- '<|im_system|>tool<|im_middle|>## Return of ' + (ids.queue.pop(0) if ids.queue else m.tool_call_id) + '\n' + m.content }}
    {%- else %}
        {{- '<|im_system|>system<|im_middle|>' + m.content }}
    {%- endif %}
    {{- '<|im_end|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_assistant|>assistant<|im_middle|>' }}
{%- endif %}
`;

/** MiniMax-M2. */
export const MINIMAX_M2_TOOLS_TEMPLATE: string = String
  .raw`{#- MiniMax-M2: tools as <tool> JSON lines, calls in one <minimax:tool_call> section as
    <invoke name="NAME"> with <parameter name="K">V</parameter> lines (strings raw, the rest JSON),
    results as <response> in a tool turn; the generation prompt opens <think>. -#}
{{- ']~!b[]~b]system\n' }}
{%- if messages[0].role == 'system' %}
    {{- messages[0].content }}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {{- 'You are a helpful assistant.' }}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if tools %}
    {{- '\n\n# Tools\nYou may call one or more tools to assist with the user query.\nHere are the tools available in JSONSchema format:\n\n<tools>\n' }}
    {%- for tool in tools %}
        {{- '<tool>' + tool.function | tojson + '</tool>\n' }}
    {%- endfor %}
    {{- '</tools>\n\nWhen making tool calls, use XML format to invoke tools and pass parameters:\n\n<minimax:tool_call>\n<invoke name="tool-name-1">\n<parameter name="param-key-1">param-value-1</parameter>\n...\n</invoke>\n</minimax:tool_call>' }}
{%- endif %}
{{- '[e~[\n' }}
{%- set ns = namespace(last_user=-1) %}
{%- for m in loop_messages %}
    {%- if m.role == 'user' %}
        {%- set ns.last_user = loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for m in loop_messages %}
    {%- if m.role == 'assistant' %}
        {{- ']~b]ai\n' }}
        {%- if m.reasoning_content and loop.index0 > ns.last_user %}
            {{- '<think>\n' + m.reasoning_content + '\n</think>\n\n' }}
        {%- endif %}
        {{- m.content or '' }}
        {%- if m.tool_calls %}
            {{- '\n<minimax:tool_call>\n' }}
            {%- for tc in m.tool_calls %}
                {{- '<invoke name="' + tc.function.name + '">\n' }}
                {%- for k, v in tc.function.arguments | items %}
                    {{- '<parameter name="' + k + '">' + (v if v is string else v | tojson) + '</parameter>\n' }}
                {%- endfor %}
                {{- '</invoke>\n' }}
            {%- endfor %}
            {{- '</minimax:tool_call>' }}
        {%- endif %}
        {{- '[e~[\n' }}
    {%- elif m.role == 'tool' %}
        {%- if loop.first or loop_messages[loop.index0 - 1].role != 'tool' %}
            {{- ']~b]tool' }}
        {%- endif %}
        {{- '\n<response>' + m.content + '</response>' }}
        {%- if loop.last or loop_messages[loop.index0 + 1].role != 'tool' %}
            {{- '[e~[\n' }}
        {%- endif %}
    {%- else %}
        {{- ']~b]' + m.role + '\n' + m.content + '[e~[\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- ']~b]ai\n<think>\n' }}
{%- endif %}
`;
