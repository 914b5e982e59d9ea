"""An OpenAI-compatible server on loopback that answers as a thinking target behind vLLM
with a reasoning parser: `reasoning_content` apart from `content`, and, when asked with
`return_token_ids`, the generated ids (`token_ids` on the choice, as vLLM returns them).

No model behind it: the reasoning and the answer are derived from the question, and the
ids are what the target would have generated for them after a generation prompt that opens
`<think>` (Qwen3.6): reasoning, `</think>`, the answer and `<|im_end|>`, tokenized with the
real tokenizer it is given. With `chat_template_kwargs` switching thinking off it answers
without reasoning, as the model does after an empty think block.
"""

from __future__ import annotations

import json

from openai_server import JSONHandler, Loopback


def reasoning_of(question: str) -> str:
    return f"The user asks: {question.strip()} Let me think.\nFirst, recall the facts."


def answer_of(question: str) -> str:
    return f"Here is my answer to: {question.strip()}"


class ThinkingServer(Loopback):
    def __init__(self, tok, thinking_kwarg: str = "enable_thinking", served_name: str = "thinker"):
        self.bodies: list[dict] = []
        server = self

        class Handler(JSONHandler):
            def do_GET(self):
                self._send({"object": "list", "data": [{"id": served_name, "object": "model"}]})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.bodies.append(body)
                question = body["messages"][-1]["content"]
                thinking = (body.get("chat_template_kwargs") or {}).get(thinking_kwarg, True)
                answer = answer_of(question)
                msg = {"role": "assistant", "content": answer}
                if thinking:
                    msg["reasoning_content"] = reasoning_of(question)
                    emitted = f"{msg['reasoning_content']}\n</think>\n\n{answer}<|im_end|>"
                else:
                    emitted = f"{answer}<|im_end|>"
                ids = tok(emitted, add_special_tokens=False)["input_ids"]
                choice = {"index": 0, "finish_reason": "stop", "message": msg}
                if body.get("return_token_ids"):
                    choice["token_ids"] = ids
                self._send({"model": served_name, "choices": [choice],
                            "usage": {"prompt_tokens": 10, "completion_tokens": len(ids)}})

        self._serve(Handler)
