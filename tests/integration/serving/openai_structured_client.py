#!/usr/bin/env python3
"""Structured output and tool calls against `octet serve` with the official
`openai` client (run by test_serve_structured.cpp). Exits 77 when the package
cannot be imported, 1 with a message on the first failed check.

  openai_structured_client.py BASE_URL MODEL
"""
import json
import sys

from openai_harness import check, make_client
import openai

BASE, MODEL = sys.argv[1], sys.argv[2]
client = make_client(BASE)


def valid(v, s, root):
    """A small JSON-schema validator for the keywords used here."""
    if "$ref" in s:
        node = root
        for part in s["$ref"][2:].split("/"):
            node = node[part]
        return valid(v, node, root)
    if "enum" in s:
        return v in s["enum"]
    if "const" in s:
        return v == s["const"]
    if "anyOf" in s:
        return any(valid(v, a, root) for a in s["anyOf"])
    t = s.get("type")
    if t == "object":
        if not isinstance(v, dict):
            return False
        props = s.get("properties", {})
        if any(r not in v for r in s.get("required", [])):
            return False
        if s.get("additionalProperties") is False and any(k not in props for k in v):
            return False
        return all(valid(v[k], props[k], root) for k in v if k in props)
    if t == "array":
        if not isinstance(v, list):
            return False
        if len(v) < s.get("minItems", 0) or len(v) > s.get("maxItems", 1 << 30):
            return False
        return all(valid(e, s.get("items", {}), root) for e in v)
    if t == "integer":
        return isinstance(v, int) and not isinstance(v, bool)
    if t == "number":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if t == "boolean":
        return isinstance(v, bool)
    if t == "null":
        return v is None
    if t == "string":
        return isinstance(v, str)
    return True


SCHEMA = {
    "type": "object",
    "properties": {
        "color": {"enum": ["red", "green", "blue"]},
        "count": {"type": "integer"},
        "ok": {"type": "boolean"},
        "size": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/size"}]},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 3},
    },
    "required": ["color", "count", "ok", "size", "tags"],
    "additionalProperties": False,
    "$defs": {"size": {"type": "object", "properties": {"w": {"type": "number"}}, "required": ["w"],
                       "additionalProperties": False}},
}
MESSAGES = [{"role": "user", "content": "Describe a thing as JSON."}]

# ---- json_schema: greedy and sampled, non-streamed and streamed ----
for temperature, seed in ((0.0, None), (1.0, 7), (1.0, 8)):
    r = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=400, temperature=temperature, seed=seed,
        response_format={"type": "json_schema",
                         "json_schema": {"name": "thing", "schema": SCHEMA, "strict": True}})
    c = r.choices[0]
    check(c.finish_reason == "stop", f"json_schema finish_reason {c.finish_reason}: {c.message.content!r}")
    doc = json.loads(c.message.content)
    check(valid(doc, SCHEMA, SCHEMA), f"json_schema output does not validate: {c.message.content!r}")
stream = client.chat.completions.create(
    model=MODEL, messages=MESSAGES, max_tokens=400, temperature=1.0, seed=3, stream=True,
    response_format={"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA}})
text, finish = "", None
for chunk in stream:
    if chunk.choices:
        text += chunk.choices[0].delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
check(finish == "stop", f"streamed json_schema finish_reason {finish}")
check(valid(json.loads(text), SCHEMA, SCHEMA), f"streamed json_schema output does not validate: {text!r}")

# ---- json_object: an object (or cut by max_tokens while still inside one) ----
r = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=64, temperature=0,
                                   response_format={"type": "json_object"})
c = r.choices[0]
check(c.message.content.startswith("{"), f"json_object output {c.message.content!r}")
if c.finish_reason == "stop":
    check(isinstance(json.loads(c.message.content), dict), "json_object output is not an object")

# ---- invalid schemas: 400 saying where ----
for schema, where in (({"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}},
                       "/properties/n/minimum"),
                      ({"type": "array", "items": {"$ref": "#/$defs/missing"}}, "/items/$ref")):
    try:
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=8,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
        check(False, f"schema {schema} was accepted")
    except openai.BadRequestError as e:
        check(where in str(e), f"the error for {schema} does not name {where}: {e}")

# ---- tools ----
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather of a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"enum": ["Paris", "Oslo"]}, "days": {"type": "integer"}},
                       "required": ["city", "days"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Local time",
        "parameters": {"type": "object", "properties": {"utc": {"type": "boolean"}}, "required": ["utc"]}}},
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]

# The tools reach the prompt: more prompt tokens with them, the same with tool_choice none.
plain = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=1)
auto = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, tools=TOOLS)
none = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=1, tools=TOOLS,
                                      tool_choice="none")
check(auto.usage.prompt_tokens > plain.usage.prompt_tokens + 50,
      f"tools did not reach the prompt ({auto.usage.prompt_tokens} vs {plain.usage.prompt_tokens})")
check(none.usage.prompt_tokens == plain.usage.prompt_tokens, "tool_choice none still rendered the tools")

# A forced call of a named function: tool_calls, finish_reason tool_calls, valid arguments.
params = TOOLS[0]["function"]["parameters"]
r = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=200, tools=TOOLS,
                                   tool_choice={"type": "function", "function": {"name": "get_weather"}})
c = r.choices[0]
check(c.finish_reason == "tool_calls", f"forced call finish_reason {c.finish_reason}: {c.message}")
check(c.message.tool_calls and len(c.message.tool_calls) == 1, f"no tool call: {c.message}")
call = c.message.tool_calls[0]
check(call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_"),
      f"tool call {call}")
args = json.loads(call.function.arguments)
check(valid(args, params, params), f"arguments {args} do not validate")

# The round trip: the call and its result in the history, then "required" (any tool).
history = ASK + [
    {"role": "assistant", "content": None,
     "tool_calls": [{"id": call.id, "type": "function",
                     "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
    {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 21})},
]
r2 = client.chat.completions.create(model=MODEL, messages=history, max_tokens=200, tools=TOOLS,
                                    tool_choice="required", temperature=1.0, seed=5)
c2 = r2.choices[0]
check(c2.finish_reason == "tool_calls" and c2.message.tool_calls, f"required: {c2.message}")
name2 = c2.message.tool_calls[0].function.name
check(name2 in ("get_weather", "get_time"), f"required call of {name2}")
p2 = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == name2)
check(valid(json.loads(c2.message.tool_calls[0].function.arguments), p2, p2), "required arguments")
check(r2.usage.prompt_tokens > r.usage.prompt_tokens + 10,
      f"the call and its result did not reach the prompt ({r2.usage.prompt_tokens})")

# Streamed: the call arrives as tool_calls deltas.
stream = client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=200, tools=TOOLS,
                                        tool_choice="required", stream=True)
names, arguments, finish, ids = {}, {}, None, {}
for chunk in stream:
    if not chunk.choices:
        continue
    d = chunk.choices[0].delta
    for tc in d.tool_calls or []:
        if tc.id:
            ids[tc.index] = tc.id
        if tc.function and tc.function.name:
            names[tc.index] = tc.function.name
        if tc.function and tc.function.arguments:
            arguments[tc.index] = arguments.get(tc.index, "") + tc.function.arguments
    finish = chunk.choices[0].finish_reason or finish
check(finish == "tool_calls", f"streamed finish_reason {finish}")
check(len(names) == 1 and names[0] in ("get_weather", "get_time") and ids.get(0, "").startswith("call_"),
      f"streamed call {names} {ids}")
p3 = next(t["function"]["parameters"] for t in TOOLS if t["function"]["name"] == names[0])
check(valid(json.loads(arguments[0]), p3, p3), f"streamed arguments {arguments}")


def stream_call(**kwargs):
    """A streamed chat's tool-call deltas, checked to come as OpenAI sends them: per call
    first its index, id, type and name with empty arguments, then argument fragments
    only. Returns (calls as [name, arguments], content, finish_reason, fragment counts)."""
    calls, content, finish, fragments = {}, "", None, {}
    for chunk in client.chat.completions.create(model=MODEL, stream=True, **kwargs):
        if not chunk.choices:
            continue
        d = chunk.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or []:
            if tc.index not in calls:
                check(tc.id and tc.id.startswith("call_") and tc.type == "function" and tc.function.name
                      and tc.function.arguments == "", f"a call's first delta {tc}")
                calls[tc.index] = [tc.function.name, ""]
                fragments[tc.index] = 0
            else:
                check(not tc.id and not (tc.function and tc.function.name), f"a later delta {tc}")
                calls[tc.index][1] += tc.function.arguments
                fragments[tc.index] += 1
        finish = chunk.choices[0].finish_reason or finish
    return [calls[k] for k in sorted(calls)], content, finish, fragments


# Llama-3's JSON form, {"name": ..., "parameters": {...}}, with tool_choice auto: the
# reply is steered into that form by guided_json (the random model would not write
# it), then parsed into tool_calls, streamed (the head first, then the arguments
# as they are decoded) and not, alike.
LLAMA_FORM = {"type": "object", "properties": {"name": {"const": "get_weather"}, "parameters": params},
              "required": ["name", "parameters"], "additionalProperties": False}
req = dict(messages=ASK, max_tokens=200, tools=TOOLS, temperature=0, extra_body={"guided_json": LLAMA_FORM})
whole = client.chat.completions.create(model=MODEL, **req).choices[0]
check(whole.finish_reason == "tool_calls" and whole.message.tool_calls and not whole.message.content,
      f"Llama-3 form, not streamed: {whole}")
check(whole.message.tool_calls[0].function.name == "get_weather", f"Llama-3 form name {whole.message}")
wargs = json.loads(whole.message.tool_calls[0].function.arguments)
check(valid(wargs, params, params), f"Llama-3 form arguments {wargs}")
calls, content, finish, fragments = stream_call(**req)
check(finish == "tool_calls" and content == "", f"Llama-3 form streamed: {finish} {content!r}")
check(len(calls) == 1 and calls[0][0] == "get_weather" and json.loads(calls[0][1]) == wargs,
      f"Llama-3 form streamed {calls} vs {wargs}")
check(fragments[0] >= 3, f"the arguments came in {fragments[0]} fragments, not as decoded")

# Keys in the other order ("parameters" first): no head can go out early; the call is
# held to its end and sent whole, streamed or not.
REVERSED = {"type": "object", "properties": {"parameters": params, "name": {"const": "get_weather"}},
            "required": ["parameters", "name"], "additionalProperties": False}
req["extra_body"] = {"guided_json": REVERSED}
whole = client.chat.completions.create(model=MODEL, **req).choices[0]
check(whole.finish_reason == "tool_calls" and whole.message.tool_calls, f"reversed keys: {whole}")
rargs = json.loads(whole.message.tool_calls[0].function.arguments)
calls, content, finish, fragments = stream_call(**req)
check(finish == "tool_calls" and content == "" and len(calls) == 1 and json.loads(calls[0][1]) == rargs,
      f"reversed keys streamed: {calls} {content!r} {finish}")

# JSON that is no call stays content, streamed and not.
req["extra_body"] = {"guided_json": {"type": "object", "properties": {"city": {"enum": ["Oslo"]}},
                                     "required": ["city"], "additionalProperties": False}}
whole = client.chat.completions.create(model=MODEL, **req).choices[0]
check(not whole.message.tool_calls and json.loads(whole.message.content) == {"city": "Oslo"},
      f"JSON that is no call: {whole}")
calls, content, finish, _ = stream_call(**req)
check(not calls and json.loads(content) == {"city": "Oslo"} and finish == "stop",
      f"JSON that is no call, streamed: {calls} {content!r} {finish}")

# A forced call streams its arguments as they are decoded too.
calls, content, finish, fragments = stream_call(
    messages=ASK, max_tokens=200, tools=TOOLS, temperature=0,
    tool_choice={"type": "function", "function": {"name": "get_weather"}})
check(finish == "tool_calls" and len(calls) == 1 and valid(json.loads(calls[0][1]), params, params),
      f"forced, streamed: {calls} {finish}")
check(fragments[0] >= 3, f"forced call's arguments in {fragments[0]} fragments")

# Bad tool requests.
for kwargs, param in (({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
                       "tool_choice"),
                      ({"tool_choice": "required"}, "tool_choice"),
                      ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools")):
    try:
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4, **kwargs)
        check(False, f"{kwargs} was accepted")
    except openai.BadRequestError as e:
        check(e.body is not None and e.body.get("param") == param, f"{kwargs}: {e}")

print("ok")
