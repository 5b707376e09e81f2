"""Renders the chat-template test cases with Python's jinja2, set up the way
transformers' apply_chat_template sets it up, and writes the references the
Go tests compare against.

Usage, from models/chat/testdata (needs only the jinja2 package):

    python3 gen/render.py

It reads cases.json and writes reference_renderings.json.
"""

import datetime
import json
import sys

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class TemplateError(Exception):
    pass


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # As transformers defines it: json.dumps with ensure_ascii off by default.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def environment(now):
    def strftime_now(format):
        return now.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def main():
    with open("cases.json", encoding="utf-8") as f:
        spec = json.load(f)
    env = environment(datetime.datetime.fromisoformat(spec["now"]))
    out = []
    for case in spec["cases"]:
        path = case["template"]
        bos, eos = case.get("bos_token"), case.get("eos_token")
        with open(path, encoding="utf-8") as f:
            if path.endswith(".json"):
                config = json.load(f)
                source = config["chat_template"]
                bos, eos = config.get("bos_token"), config.get("eos_token")
            else:
                source = f.read()
        variables = dict(case.get("vars", {}))
        variables.update(messages=case["messages"], add_generation_prompt=case["add_generation_prompt"],
                         bos_token=bos, eos_token=eos)
        result = {"name": case["name"]}
        try:
            result["text"] = env.from_string(source).render(**variables)
        except TemplateError as e:
            result["error"] = str(e)
        out.append(result)
    with open("reference_renderings.json", "w", encoding="utf-8") as f:
        json.dump({"reference": f"Python jinja2 {jinja2.__version__} (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols; transformers' tojson, raise_exception, strftime_now)",
                   "renderings": out}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(out)} renderings", file=sys.stderr)


if __name__ == "__main__":
    main()
