"""docs/quickstart.md: the openai client against `mmgate demo`, unchanged (run from the repo root:
python examples/quickstart/client.py). Lists the models, then streams an answer about sunset.png."""

import base64
from pathlib import Path

from openai import OpenAI

image = base64.b64encode((Path(__file__).parent / "sunset.png").read_bytes()).decode()
client = OpenAI(base_url="http://127.0.0.1:8080/v1", api_key="unused")
print([m.id for m in client.models.list()])
stream = client.chat.completions.create(
    model="Qwen/Qwen3-VL-32B-Instruct",
    messages=[{"role": "user", "content": [
        {"type": "text", "text": "Describe it in a few words."},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
    ]}],
    max_tokens=8, stream=True, stream_options={"include_usage": True},
)  # fmt: skip
pieces = []
usage = None
for chunk in stream:
    if chunk.choices:
        pieces.append(repr(chunk.choices[0].delta.content))
    if chunk.usage is not None:
        usage = chunk.usage.model_dump(exclude_none=True)
print(" ".join(pieces))
print("usage:", usage)
