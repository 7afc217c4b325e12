"""Ask a Strata server about an image, with the `openai` SDK, and stream the answer.

    strata serve --model /models/Qwen2.5-VL-7B-Instruct        # in another terminal
    python examples/image_chat.py cat.jpg "What is in this picture?"

Without an image path it draws a small test picture. The image travels as a
base64 data: URL, which every Strata server accepts; file paths and http(s)
URLs work only when the server was started with --media-dir or
--allow-remote-media.
"""

from __future__ import annotations

import argparse
import base64
import io
import mimetypes

from openai import OpenAI


def data_url(path: str | None) -> str:
    if path is None:
        from PIL import Image, ImageDraw

        image = Image.new("RGB", (224, 160), "skyblue")
        ImageDraw.Draw(image).ellipse((70, 30, 150, 110), fill="orange")
        buffer = io.BytesIO()
        image.save(buffer, "PNG")
        data, mime = buffer.getvalue(), "image/png"
    else:
        with open(path, "rb") as f:
            data = f.read()
        mime = mimetypes.guess_type(path)[0] or "image/png"
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("image", nargs="?", help="a PNG, JPEG, WebP or GIF file (default: a drawn test picture)")
    parser.add_argument("question", nargs="?", default="What is in this picture?")
    parser.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    parser.add_argument("--api-key", default="unused", help="the server's --api-key, if it has one")
    args = parser.parse_args()

    client = OpenAI(base_url=args.base_url, api_key=args.api_key)
    model = client.models.list().data[0].id
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": data_url(args.image)}},
            {"type": "text", "text": args.question},
        ]}],
        temperature=0,
        max_tokens=256,
        stream=True,
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            print(chunk.choices[0].delta.content, end="", flush=True)
    print()


if __name__ == "__main__":
    main()
