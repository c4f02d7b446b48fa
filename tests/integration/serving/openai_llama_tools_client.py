#!/usr/bin/env python3
"""Tool calls through a Llama-3.1-style chat template against `octet serve`
with the official `openai` client (run by test_serve_structured.cpp): the
tools reach the prompt (in the first user turn, or in the system block with
chat_template_kwargs tools_in_user_message false), a forced call comes back
as tool_calls, a call's arguments sent as JSON text are rendered as the object
they encode, and what the template refuses is a 400 that says why. Exits 77
when the package cannot be imported, 1 with a message on the first failed check.

  openai_llama_tools_client.py BASE_URL MODEL
"""
import json
import sys

from openai_harness import check, make_client
import openai

BASE, MODEL = sys.argv[1], sys.argv[2]
client = make_client(BASE)


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}},
                   "required": ["city"], "additionalProperties": False}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def prompt_tokens(messages, **kw):
    r = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1, temperature=0,
                                       **kw)
    return r.usage.prompt_tokens


plain = prompt_tokens(ASK)
in_user = prompt_tokens(ASK, tools=TOOLS)
in_system = prompt_tokens(ASK, tools=TOOLS,
                          extra_body={"chat_template_kwargs": {"tools_in_user_message": False}})
check(in_user > plain + 40, f"the tools did not reach the prompt ({in_user} vs {plain})")
check(in_system > plain + 40 and in_system != in_user,
      f"tools_in_user_message false: {in_system} tokens (in the user turn {in_user}, none {plain})")
check(prompt_tokens(ASK, tools=TOOLS, tool_choice="none") == plain,
      "tool_choice none still rendered the tools")

# A forced call: tool_calls, finish_reason tool_calls, arguments that parse.
r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=120, tools=TOOLS,
                                   tool_choice={"type": "function", "function": {"name": "get_weather"}})
c = r.choices[0]
check(c.finish_reason == "tool_calls" and c.message.tool_calls, f"forced call: {c}")
call = c.message.tool_calls[0]
args = json.loads(call.function.arguments)
check(call.function.name == "get_weather" and args.get("city") in ("Paris", "Oslo"), f"forced call {call}")

# The round trip. Arguments as the client sends them (JSON text) and as an
# object render the same prompt: the text is parsed before the template sees it.
def history(arguments):
    return ASK + [{"role": "assistant", "content": None,
                   "tool_calls": [{"id": call.id, "type": "function",
                                   "function": {"name": "get_weather", "arguments": arguments}}]},
                  {"role": "tool", "tool_call_id": call.id, "content": "{\"temperature_c\": 21}"}]


as_text = prompt_tokens(history(json.dumps({"city": "Paris"}, separators=(",", ":"))), tools=TOOLS)
as_object = prompt_tokens(history({"city": "Paris"}), tools=TOOLS)
check(as_text == as_object, f"string arguments rendered differently: {as_text} vs {as_object} tokens")
check(as_text > in_user, f"the call and its result did not reach the prompt ({as_text} vs {in_user})")
r = client.chat.completions.create(model=MODEL, messages=history(call.function.arguments),
                                   max_tokens=120, tools=TOOLS, tool_choice="required")
check(r.choices[0].finish_reason == "tool_calls", f"required after a round trip: {r.choices[0]}")

# What the template refuses: two calls in one turn; arguments that are not JSON.
two = ASK + [{"role": "assistant", "content": None, "tool_calls": [
    {"id": "a", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}},
    {"id": "b", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}]}]
for messages, words in ((two, "2 tool calls"), (history("{city: Paris"), "arguments is not valid JSON")):
    try:
        client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1, tools=TOOLS)
        check(False, f"accepted: {messages}")
    except openai.BadRequestError as e:
        check(words in str(e), f"the 400 does not say '{words}': {e}")
print("ok")
