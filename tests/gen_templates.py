#!/usr/bin/python3
"""Generates the chat template conformance corpus for tests/test_chat_template.c.

Holds published chat templates (Llama 3 / 3.2, Qwen2.5, Qwen3, Qwen3.5, Mistral v1/v3/v7,
Gemma 2/3, Phi-3/4, ChatML, DeepSeek-R1 distill) plus a synthetic template
that exercises interpreter features, and message lists.  Renders every
(template, case) pair with the Python jinja2 library configured as Hugging
Face's apply_chat_template configures it, and writes:
  data/templates/<name>.jinja   the template sources
  data/templates/cases.json     {case name: template variables}
  data/templates/expected.json  [{template, case, output | error, raised}]
The expected renderings are committed (CI has no jinja2).  Run from tests/:
  /usr/bin/python3 gen_templates.py      (Debian: apt-get install python3-jinja2)
"""
import json
import os
from datetime import datetime, timezone

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "templates")

# Fixed instant for strftime_now: 2024-07-26 12:00:00 UTC.  kiln reads it
# from the "kct_now" variable.
NOW = 1721995200

TEMPLATES = {
    'chatml': r'''{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}''',
    'llama3': r'''{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>

'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>

' }}{% endif %}''',
    'llama3.2': r'''{{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if tools is not none %}
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

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}''',
    'qwen2.5': r'''{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}''',
    'qwen3': r'''{%- if tools %}
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
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}''',
    'mistral-v1': r'''{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}''',
    'mistral-v3': r'''{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
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
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}''',
    'mistral-v7': r'''{%- set today = strftime_now("%Y-%m-%d") %}
{%- set default_system_message = "You are Mistral Small 3, a Large Language Model (LLM) created by Mistral AI, a French startup headquartered in Paris.\nYour knowledge base was last updated on 2023-10-01. The current date is " + today + ".\n\nWhen you're not sure about some information, you say that you don't have the information and don't make up anything.\nIf the user's question is not clear, ambiguous, or does not provide enough context for you to accurately answer the question, you do not try to answer it right away and you rather ask the user to clarify their request (e.g. \"What are some good restaurants around me?\" => \"Where are you?\" or \"When is the next flight to Tokyo\" => \"Where do you travel from?\")" %}

{{- bos_token }}

{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system_message = default_system_message %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}

{%- for message in loop_messages %}
    {%- if message['role'] == 'user' %}
        {{- '[INST]' + message['content'] + '[/INST]' }}
    {%- elif message['role'] == 'system' %}
        {{- '[SYSTEM_PROMPT]' + message['content'] + '[/SYSTEM_PROMPT]' }}
    {%- elif message['role'] == 'assistant' %}
        {{- message['content'] + eos_token }}
    {%- else %}
        {{- raise_exception('Only user, system and assistant roles are supported!') }}
    {%- endif %}
{%- endfor %}''',
    'gemma2': r'''{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '
' + message['content'] | trim + '<end_of_turn>
' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model
'}}{% endif %}''',
    'gemma3': r'''{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\n\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- elif message['content'] is iterable -%}
        {%- for item in message['content'] -%}
            {%- if item['type'] == 'image' -%}
                {{ '<start_of_image>' }}
            {%- elif item['type'] == 'text' -%}
                {{ item['text'] | trim }}
            {%- endif -%}
        {%- endfor -%}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\n'}}
{%- endif -%}''',
    'phi3': r'''{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>
' + message['content'] + '<|end|>
'}}{% elif message['role'] == 'user' %}{{'<|user|>
' + message['content'] + '<|end|>
'}}{% elif message['role'] == 'assistant' %}{{'<|assistant|>
' + message['content'] + '<|end|>
'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>
' }}{% else %}{{ eos_token }}{% endif %}''',
    'phi4': r'''{% for message in messages %}{% if (message['role'] == 'system') %}{{'<|im_start|>system<|im_sep|>' + message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'user') %}{{'<|im_start|>user<|im_sep|>' + message['content'] + '<|im_end|>'}}{% elif (message['role'] == 'assistant') %}{{'<|im_start|>assistant<|im_sep|>' + message['content'] + '<|im_end|>'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant<|im_sep|>' }}{% endif %}''',
    'deepseek-r1-distill': r'''{% if not add_generation_prompt is defined %}{% set add_generation_prompt = false %}{% endif %}{% set ns = namespace(is_first=false, is_tool=false, is_output_first=true, system_prompt='') %}{%- for message in messages %}{%- if message['role'] == 'system' %}{% set ns.system_prompt = message['content'] %}{%- endif %}{%- endfor %}{{bos_token}}{{ns.system_prompt}}{%- for message in messages %}{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is none %}{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls']%}{%- if not ns.is_first %}{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '```json' + '\n' + tool['function']['arguments'] + '\n' + '```' + '<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}{{'\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\n' + '```json' + '\n' + tool['function']['arguments'] + '\n' + '```' + '<｜tool▁call▁end｜>'}}{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}{%- endif %}{%- if message['role'] == 'assistant' and message['content'] is not none %}{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}{% set content = message['content'] %}{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}{% endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endif %}{%- if message['role'] == 'tool' %}{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- set ns.is_output_first = false %}{%- else %}{{'\n<｜tool▁output▁begin｜>' + message['content'] + '<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜><think>\n'}}{% endif %}''',
    'features': r'''{#- Synthetic template: exercises interpreter features against jinja2. -#}
{%- macro fmt_msg(m, prefix='> ', upper=false) -%}
{{ prefix }}{{ m.role | upper if upper else m.role }}: {{ m.content if m.content is string else m.content | tojson }}
{%- endmacro -%}
{%- macro wrap(tag) -%}<{{ tag }}>{{ caller() }}</{{ tag }}>{%- endmacro %}
[literals] {{ 1 }} {{ 1.5 }} {{ -3 }} {{ 1e3 }} {{ 'a' 'b' }} {{ "q\"uote" }} {{ true }} {{ none }} {{ [1, 2] }} {{ {'k': 'v'} }} {{ (1, 'x') }}
[arith] {{ 7 + 3 }} {{ 7 - 10 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 8 }} {{ 1.5 * 2 }} {{ 10 / 4 }} {{ 'ab' ~ 3 ~ none }} {{ 'x' * 3 }} {{ [1] + [2] }}
[compare] {{ 1 < 2 }} {{ 2 <= 1 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ 'a' != 'a' }} {{ 2 in [1, 2] }} {{ 'ell' in 'hello' }} {{ 'z' not in 'hello' }} {{ 'k' in {'k': 1} }} {{ 1 < 2 < 3 }}
[logic] {{ true and 'yes' }} {{ false or 'fallback' }} {{ not none }} {{ 'a' if 0 else 'b' }} {{ none or 0 }} {{ (1 if true) }}
[strings] {{ '  pad  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '\n\nlead'.lstrip('\n') }}|{{ 'trail  '.rstrip() }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a-b-c'.split('-', 1) }}|{{ 'Hello'.startswith('He') }}|{{ 'Hello'.endswith(('x', 'lo')) }}|{{ 'MiXed'.upper() }}{{ 'MiXed'.lower() }}|{{ 'hello world'.title() }}|{{ 'hello'.capitalize() }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'hello'.find('l') }}|{{ 'hello'.count('l') }}|{{ '-'.join(['x', 'y']) }}
[unicode] {{ 'héllo wörld'|upper }} {{ 'ünï'|length }} {{ 'ñandú'[1:3] }} {{ 'añb'[-1] }} {{ 'ÉCOLE'|lower }} {{ '日本語'|reverse }}
[slices] {{ [1, 2, 3, 4, 5][1:3] }} {{ [1, 2, 3, 4, 5][::-1] }} {{ [1, 2, 3, 4, 5][::2] }} {{ [1, 2, 3][-1] }} {{ 'abcdef'[-3:] }} {{ 'abcdef'[:-4] }} {{ [1, 2, 3][5:] }}
[filters] {{ '  t  '|trim }}|{{ 'abc'|upper }}|{{ [3, 1, 2]|length }}|{{ 'abc'|count }}|{{ [1, 2, 3]|join(', ') }}|{{ undefined_thing|default('dflt') }}|{{ ''|d('empty', true) }}|{{ [4, 5]|first }}|{{ [4, 5]|last }}|{{ 'ab'|list }}|{{ 'a-b'|replace('-', '+') }}|{{ 42|string ~ '!' }}|{{ '42'|int + 1 }}|{{ 'x'|int }}|{{ 3.7|int }}|{{ '2.5'|float }}|{{ 2.5|round }}|{{ 3.14159|round(2) }}|{{ 2.7|round(0, 'floor') }}|{{ 'hello there'|capitalize }}|{{ 'the end-game'|title }}|{{ '<b>&'|escape }}|{{ '<i>'|safe }}|{{ -3|abs }}|{{ ['b', 'A', 'a', 'c']|unique|list }}|{{ [3, 1, 2]|sort }}|{{ ['b', 'A', 'c']|sort(reverse=true) }}|{{ {'b': 1, 'a': 2}|dictsort }}|{{ [1, 2, 3]|reverse|list }}|{{ 'abc'|reverse }}|{{ [1, 2, 3]|sum }}|{{ [3, 9, 2]|max }}{{ [3, 9, 2]|min }}|{{ 'one two three'|wordcount }}
[tojson] {{ {'a': [1, 2.5, none, true], 'b': 'x"y\nz', 'c': {}} | tojson }}
{{ {'a': [1, {'b': []}], 'u': 'ü'} | tojson(indent=2) }}
{{ {'z': 1, 'a': 2} | tojson(sort_keys=true) }} {{ [1, 2] | tojson(separators=(',', ':')) }} {{ 'é\u0001'|tojson }}
[indent] {{ 'a\nb\n\nc'|indent(2) }}|{{ 'a\nb'|indent(2, true) }}
[select] {{ messages|selectattr('role', 'equalto', 'user')|map(attribute='content')|list }} {{ messages|rejectattr('role', 'eq', 'user')|map(attribute='role')|join(',') }} {{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 0, none, 'x']|select|list }} {{ [1, 2, 3]|reject('even')|list }} {{ messages|map(attribute='missing', default='?')|join }} {{ ['a', 'b']|map('upper')|join }} {{ messages|selectattr('tool_calls', 'defined')|list|length }} {{ messages|sort(attribute='role')|map(attribute='role')|join(' ') }}
[tests] {{ x is defined }} {{ undefined_thing is undefined }} {{ none is none }} {{ 'a' is string }} {{ 1 is number }} {{ 1.0 is number }} {{ 1 is integer }} {{ 1.0 is integer }} {{ true is boolean }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ [] is sequence }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }} {{ 1 is equalto 1 }} {{ 2 is eq(3) }} {{ 1 is in [1] }} {{ true is true }} {{ false is false }} {{ 0 is false }} {{ 'x' is not none }} {{ 'abc' is lower }} {{ 'ABC' is upper }} {{ 2 is gt 1 }} {{ fmt_msg is callable }}
[dict] {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 'dv') }} {{ d.keys()|list }} {{ d.values()|list }} {% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %} {% for k, v in d|items %}{{ k }}{{ v }}{% endfor %} {% for k in d %}{{ k }}{% endfor %} {{ d.nested.deep }} {{ d['nested']['deep'] }} {{ d.nested.missing is defined }} {{ d|length }} {{ dict(x=1, y=2) }}
[loop] {% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ loop.length }}/{{ loop.first }}/{{ loop.last }}/{{ loop.previtem.role if loop.previtem is defined else '-' }}/{{ loop.cycle('odd', 'even') }} {% endfor %}
[loop-filter] {% for m in messages if m.role != 'system' %}{{ loop.index }}:{{ m.role }}{{ ',' if not loop.last }}{% endfor %}
[loop-else] {% for i in [] %}never{% else %}empty{% endfor %} {% for i in undefined_thing %}x{% else %}undef-empty{% endfor %}
[loop-ctl] {% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i > 4 %}{% break %}{% endif %}{{ i }}{% endfor %}
[range] {{ range(3)|list }} {{ range(1, 7, 2)|list }} {{ range(5, 0, -2)|list }}
[nested-loop] {% for a in [1, 2] %}{% for b in 'xy' %}{{ a }}{{ b }}{{ loop.index }}{% endfor %}.{{ loop.index }} {% endfor %}
[scope] {% set outer = 'o' %}{% for i in [1, 2] %}{% set outer = 'inner' ~ i %}{{ outer }} {% endfor %}{{ outer }} {% if true %}{% set outer = 'if-set' %}{% endif %}{{ outer }}
[namespace] {% set ns = namespace(count=0, items=[]) %}{% for m in messages %}{% set ns.count = ns.count + 1 %}{% endfor %}{{ ns.count }} {% set ns.flag = true %}{{ ns.flag }}
[tuple-set] {% set a, b = 1, 'two' %}{{ a }} {{ b }} {% set t = 1, 2 %}{{ t }}
[block-set] {% set captured %}  inner {{ 1 + 1 }} text  {% endset %}[{{ captured }}] {% set trimmed | trim | upper %}  shout  {% endset %}[{{ trimmed }}]
[macro] {{ fmt_msg(messages[0]) }}|{{ fmt_msg(messages[1], upper=true) }}|{{ fmt_msg(messages[1], '# ') }}|{% call wrap('b') %}bold {{ x }}{% endcall %}
[filter-block] {% filter upper %}shouted {{ x }}{% endfilter %}
[raw] {% raw %}{{ not evaluated }} {% if %}{% endraw %}
[list-append] {% set acc = [] %}{% for m in messages %}{% set _ = acc.append(m.role) %}{% endfor %}{{ acc }}
[none-attr] {{ none_value.attr is defined }} {{ (none_value.attr or 'fallback') }}
[time] {{ strftime_now('%Y-%m-%d %H:%M') }}
[ws]
    {% if true %}
        lstrip and trim_blocks apply here
    {% endif %}
    {#- comment with minus -#}
    after comment
    {%+ if true %}plus keeps indentation{% endif %}
    {{ 'vars keep indentation' }}
  {%- if true -%}   minus eats both sides   {%- endif -%}
!
{# plain comment #}
end''',
}


# Qwen3.5 (qwen35 / qwen35moe GGUFs' tokenizer.chat_template): thinking on by
# default (the generation prompt opens <think>), tool calls as
# <tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>.
TEMPLATES['qwen3.5'] = r'''{%- set image_count = namespace(value=0) %}
{%- set video_count = namespace(value=0) %}
{%- macro render_content(content, do_vision_count, is_system_content=false) %}
    {%- if content is string %}
        {{- content }}
    {%- elif content is iterable and content is not mapping %}
        {%- for item in content %}
            {%- if 'image' in item or 'image_url' in item or item.type == 'image' %}
                {%- if is_system_content %}
                    {{- raise_exception('System message cannot contain images.') }}
                {%- endif %}
                {%- if do_vision_count %}
                    {%- set image_count.value = image_count.value + 1 %}
                {%- endif %}
                {%- if add_vision_id %}
                    {{- 'Picture ' ~ image_count.value ~ ': ' }}
                {%- endif %}
                {{- '<|vision_start|><|image_pad|><|vision_end|>' }}
            {%- elif 'video' in item or item.type == 'video' %}
                {%- if is_system_content %}
                    {{- raise_exception('System message cannot contain videos.') }}
                {%- endif %}
                {%- if do_vision_count %}
                    {%- set video_count.value = video_count.value + 1 %}
                {%- endif %}
                {%- if add_vision_id %}
                    {{- 'Video ' ~ video_count.value ~ ': ' }}
                {%- endif %}
                {{- '<|vision_start|><|video_pad|><|vision_end|>' }}
            {%- elif 'text' in item %}
                {{- item.text }}
            {%- else %}
                {{- raise_exception('Unexpected item type in content.') }}
            {%- endif %}
        {%- endfor %}
    {%- elif content is none or content is undefined %}
        {{- '' }}
    {%- else %}
        {{- raise_exception('Unexpected content type.') }}
    {%- endif %}
{%- endmacro %}
{%- if not messages %}
    {{- raise_exception('No messages provided.') }}
{%- endif %}
{%- if tools and tools is iterable and tools is not mapping %}
    {{- '<|im_start|>system\n' }}
    {{- "# Tools\n\nYou have access to the following functions:\n\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>" }}
    {{- '\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>' }}
    {%- if messages[0].role == 'system' %}
        {%- set content = render_content(messages[0].content, false, true)|trim %}
        {%- if content %}
            {{- '\n\n' + content }}
        {%- endif %}
    {%- endif %}
    {{- '<|im_end|>\n' }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {%- set content = render_content(messages[0].content, false, true)|trim %}
        {{- '<|im_start|>system\n' + content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" %}
        {%- set content = render_content(message.content, false)|trim %}
        {%- if not(content.startswith('<tool_response>') and content.endswith('</tool_response>')) %}
            {%- set ns.multi_step_tool = false %}
            {%- set ns.last_query_index = index %}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if ns.multi_step_tool %}
    {{- raise_exception('No user query found in messages.') }}
{%- endif %}
{%- for message in messages %}
    {%- set content = render_content(message.content, true)|trim %}
    {%- if message.role == "system" %}
        {%- if not loop.first %}
            {{- raise_exception('System message must be at the beginning.') }}
        {%- endif %}
    {%- elif message.role == "user" %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- set reasoning_content = reasoning_content|trim %}
        {%- if loop.index0 > ns.last_query_index %}
            {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content + '\n</think>\n\n' + content }}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls and message.tool_calls is iterable and message.tool_calls is not mapping %}
            {%- for tool_call in message.tool_calls %}
                {%- if tool_call.function is defined %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {%- if loop.first %}
                    {%- if content|trim %}
                        {{- '\n\n<tool_call>\n<function=' + tool_call.name + '>\n' }}
                    {%- else %}
                        {{- '<tool_call>\n<function=' + tool_call.name + '>\n' }}
                    {%- endif %}
                {%- else %}
                    {{- '\n<tool_call>\n<function=' + tool_call.name + '>\n' }}
                {%- endif %}
                {%- if tool_call.arguments is defined %}
                    {%- for args_name, args_value in tool_call.arguments|items %}
                        {{- '<parameter=' + args_name + '>\n' }}
                        {%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is sequence and args_value is not string) else args_value | string %}
                        {{- args_value }}
                        {{- '\n</parameter>\n' }}
                    {%- endfor %}
                {%- endif %}
                {{- '</function>\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.previtem and loop.previtem.role != "tool" %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if not loop.last and loop.nextitem.role != "tool" %}
            {{- '<|im_end|>\n' }}
        {%- elif loop.last %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- raise_exception('Unexpected message role.') }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- else %}
        {{- '<think>\n' }}
    {%- endif %}
{%- endif %}'''


def user(text):
    return {"role": "user", "content": text}


def asst(text, **extra):
    m = {"role": "assistant", "content": text}
    m.update(extra)
    return m


SYSTEM = {"role": "system", "content": "You are a helpful assistant."}

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "max_results": {"type": "integer", "default": 5}},
            "required": ["query"]}}},
]


def call(name, args, cid="call12345"):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def tool_result(content, cid="call12345", name="get_weather"):
    return {"role": "tool", "content": content, "tool_call_id": cid, "name": name}


def long_conversation(n):
    msgs = [SYSTEM]
    for i in range(n - 1):
        if i % 2 == 0:
            msgs.append(user("Question number %d: what is %d squared?" % (i // 2 + 1, i)))
        else:
            msgs.append(asst("The square of %d is %d. Anything else?" % (i - 1, (i - 1) ** 2)))
    return msgs


CASES = {
    "basic": {"messages": [SYSTEM, user("Hello!")], "add_generation_prompt": True},
    "multi_turn": {"messages": [SYSTEM, user("What is 2+2?"), asst("2 + 2 = 4."), user("And 3+3?")],
                   "add_generation_prompt": True},
    "no_system": {"messages": [user("Hi there"), asst("Hello! How can I help?"), user("Tell me a joke.")],
                  "add_generation_prompt": False},
    "bad_alternation": {"messages": [user("one"), user("two")], "add_generation_prompt": True},
    "tools": {"messages": [SYSTEM, user("What's the weather in Paris?"),
                           asst(None, tool_calls=[call("get_weather", {"city": "Paris", "unit": "celsius"})]),
                           tool_result('{"temperature": 21, "condition": "sunny"}'),
                           asst("It is 21 °C and sunny in Paris."), user("Thanks!")],
              "tools": TOOLS, "add_generation_prompt": True},
    "tools_parallel": {"messages": [user("Weather in Oslo and news about it?"),
                                    asst("Let me check both.", tool_calls=[
                                        call("get_weather", {"city": "Oslo"}, "callAAAAA"),
                                        call("search", {"query": "Oslo news", "max_results": 3}, "callBBBBB")]),
                                    tool_result("-3 C, snow", "callAAAAA"),
                                    tool_result("Nothing new.", "callBBBBB", "search")],
                       "tools": TOOLS, "add_generation_prompt": True},
    "tools_string_args": {"messages": [user("Search cats"),
                                       asst("", tool_calls=[call("search", '{"query": "cats"}')]),
                                       tool_result("Cats are great.", name="search")],
                          "tools": TOOLS, "add_generation_prompt": True},
    "thinking_history": {"messages": [user("What is 2+2?"),
                                      asst("<think>\nSimple arithmetic.\n</think>\n\n2 + 2 = 4."),
                                      user("And times 3?")],
                         "add_generation_prompt": True, "enable_thinking": True},
    "thinking_off": {"messages": [user("Quick: capital of France?")], "add_generation_prompt": True,
                     "enable_thinking": False},
    "reasoning_content": {"messages": [user("Weather in Rome?"),
                                       asst("", reasoning_content="Need the weather tool.",
                                            tool_calls=[call("get_weather", {"city": "Rome"})]),
                                       tool_result("25 C"),
                                       asst("It is 25 C in Rome.", reasoning_content="Tool answered.")],
                          "tools": TOOLS, "add_generation_prompt": False},
    "multimodal_parts": {"messages": [{"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
                                      {"role": "user", "content": [{"type": "image"},
                                                                   {"type": "text", "text": " Describe this. "}]}],
                         "add_generation_prompt": True},
    "special_chars": {"messages": [SYSTEM, user("Quotes ' \" back\\\\slash {{ not a tag }} {% nor this %}\n"
                                                "tabs\there, unicode: héllo 日本 🎉   "),
                                   asst("  padded answer\n\n")],
                      "add_generation_prompt": True},
    "long_20": {"messages": long_conversation(20), "add_generation_prompt": True},
    "tool_args_types": {"messages": [user("Forecast for Lyon?"),
                                     asst("Checking.", reasoning_content="Use the tool.", tool_calls=[
                                         call("get_weather", {"city": "Lyon", "days": 3, "hours": [6, 12],
                                                              "opts": {"metric": True, "note": "a \"b\""}})]),
                                     tool_result("Rain."), asst("Rain in Lyon."), user("Thanks")],
                        "tools": TOOLS, "add_generation_prompt": True, "enable_thinking": False},
}

FEATURES_CASE = {
    "messages": [SYSTEM, user("Hi"), asst("Hello", tool_calls=[call("search", {"query": "x"})]),
                 {"role": "tool", "content": {"result": "ok"}}],
    "x": "X",
    "d": {"a": 1, "b": [1, 2], "nested": {"deep": "D"}},
    "none_value": None,
}


def strftime_now(fmt):
    return datetime.fromtimestamp(NOW, timezone.utc).strftime(fmt)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # Hugging Face's override: no HTML escaping, keys in insertion order.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def make_env(sandboxed):
    cls = ImmutableSandboxedEnvironment if sandboxed else jinja2.Environment
    env = cls(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


class Raised(Exception):
    pass


def render(env, src, variables):
    try:
        return {"output": env.from_string(src).render(**variables)}
    except jinja2.exceptions.TemplateError as e:
        # raise_exception raises a bare TemplateError; jinja2's own errors are subclasses.
        return {"error": str(e), "raised": type(e) is jinja2.exceptions.TemplateError}
    except Exception as e:  # TypeError etc. from Python operations
        return {"error": "%s: %s" % (type(e).__name__, e), "raised": False}


def main():
    # The real templates render in HF's sandbox; the feature template uses
    # list.append, which the immutable sandbox forbids, so it uses the plain
    # Environment with identical options.
    hf_env, plain_env = make_env(True), make_env(False)
    cases = dict(CASES)
    cases["features"] = FEATURES_CASE
    for v in cases.values():
        v.setdefault("bos_token", "<s>")
        v.setdefault("eos_token", "</s>")
        v["kct_now"] = NOW
    expected = []
    for name, src in TEMPLATES.items():
        with open(os.path.join(OUT, name + ".jinja"), "w", encoding="utf-8") as f:
            f.write(src)
        case_names = ["features"] if name == "features" else list(CASES)
        for cn in case_names:
            env = plain_env if name == "features" else hf_env
            entry = {"template": name, "case": cn}
            entry.update(render(env, src, json.loads(json.dumps(cases[cn]))))
            expected.append(entry)
    with open(os.path.join(OUT, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f, ensure_ascii=False, indent=1)
        f.write("\n")
    ok = sum("output" in e for e in expected)
    print("%d renderings (%d outputs, %d errors)" % (len(expected), ok, len(expected) - ok))


if __name__ == "__main__":
    main()
