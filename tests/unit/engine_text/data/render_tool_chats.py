#!/usr/bin/env python3
"""Renders tool-calling conversations through the fixtures' chat templates
(or a case's own "template_file" beside this script) with Jinja2 the way transformers.apply_chat_template does (sandboxed
environment, trim_blocks, lstrip_blocks, loopcontrols, transformers' tojson,
raise_exception, strftime_now), for test_chat_tools.cpp to compare with the
C++ rendering. Run by that test; exits 77 (skip) when jinja2 is missing.

  render_tool_chats.py FIXTURES_DIR CASES.json   ->  JSON array of texts on stdout
"""
import json
import os
import sys
from datetime import datetime

try:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment
except ImportError:
    print("jinja2 is not importable", file=sys.stderr)
    sys.exit(77)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def main():
    fixtures, cases_path = sys.argv[1], sys.argv[2]
    with open(cases_path, encoding="utf-8") as f:
        cases = json.load(f)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    out = []
    here = os.path.dirname(os.path.abspath(__file__))
    for case in cases:
        if "template_file" in case:
            with open(os.path.join(here, case["template_file"]), encoding="utf-8") as f:
                template = f.read()
            special = {"bos_token": case["bos_token"]}
        else:
            with open(f"{fixtures}/tokenizers/{case['tokenizer']}/tokenizer_config.json",
                      encoding="utf-8") as f:
                cfg = json.load(f)
            template = cfg["chat_template"]
            special = {k: cfg[k] for k in ("bos_token", "eos_token", "pad_token")
                       if isinstance(cfg.get(k), str)}
        kwargs = dict(case.get("template_kwargs", {}))
        text = env.from_string(template).render(
            messages=case["messages"], tools=case.get("tools"), documents=None,
            add_generation_prompt=case["add_generation_prompt"], **special, **kwargs)
        out.append(text)
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
