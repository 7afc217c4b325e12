"""Structured output and tool calls with the official `openai` package against `strata serve`.

    python examples/structured.py [--url http://127.0.0.1:8080]

Asks for a pydantic object (response_format from the model class), then
forces a tool call, answers it with a made-up result and prints the reply.
"""

from __future__ import annotations

import argparse
import json

from openai import OpenAI
from pydantic import BaseModel, Field


class City(BaseModel):
    name: str = Field(max_length=30)
    country: str = Field(max_length=30)
    population: int = Field(ge=0)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--model", default="smollm2-135m")
    args = parser.parse_args()
    client = OpenAI(base_url=f"{args.url}/v1", api_key="unused")

    parsed = client.chat.completions.parse(model=args.model, response_format=City, temperature=0, max_tokens=100,
                                           messages=[{"role": "user", "content": "Describe Paris."}])
    print("parsed:", parsed.choices[0].message.parsed)

    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = client.chat.completions.create(model=args.model, messages=messages, tools=[WEATHER],
                                           tool_choice="required", temperature=0, max_tokens=100)
    calls = first.choices[0].message.tool_calls
    for call in calls:
        print("call:", call.function.name, json.loads(call.function.arguments))
    messages.append({"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in calls]})
    messages += [{"role": "tool", "tool_call_id": c.id, "content": "18 C, sunny"} for c in calls]
    reply = client.chat.completions.create(model=args.model, messages=messages, tools=[WEATHER], max_tokens=60)
    print("reply:", reply.choices[0].message.content)


if __name__ == "__main__":
    main()
