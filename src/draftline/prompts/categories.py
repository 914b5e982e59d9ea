"""Prompt categories: from a source's own metadata where it has some, else one rule.

The rule (for sources without labels, e.g. ShareGPT, UltraChat, local files), first
match wins:
  multiturn     more than one user turn
  multilingual  over 30% of the letters are outside ASCII
  tool_use      the prompt offers tools or functions to call
  coding        a code fence, or programming words (python, function, compile, SQL...)
  math          an equation-like pattern or math words (solve, integral, probability...)
  writing       asks to write/compose a story, poem, essay, letter, email, article...
  reasoning     puzzles, riddles, logic questions, "step by step"
  chat          everything else
"""

from __future__ import annotations

import re

CATEGORIES = ["coding", "math", "reasoning", "writing", "chat", "multiturn", "multilingual", "tool_use", "safety"]

_TOOLS = re.compile(r'"(?:functions|tools)"\s*:|\bfunction[_ ]call|\btool[_ ]call|\bavailable tools\b', re.I)
_CODE = re.compile(r"```|\b(?:python|javascript|typescript|java|c\+\+|rust|golang|sql|html|css|bash|regex|"
                   r"function|class|method|compile[rd]?|debug|bug|code|script|api|algorithm|implement|program(?:ming)?|segfault|"
                   r"def|return|array|string|integer)\b", re.I)
_MATH = re.compile(r"\d\s*[-+*/^=]\s*\d|\$[^$]+\$|\\frac|\b(?:solve|equation|integral|derivative|probability|"
                   r"calculate|compute|sum of|product of|how many|how much|percent|remainder|prime|"
                   r"triangle|polynomial|matrix)\b", re.I)
_WRITING = re.compile(r"\b(?:write|compose|draft|create)\b.{0,40}\b(?:story|poem|essay|letter|email|article|"
                      r"blog|song|lyrics|script|speech|review|summary|paragraph|haiku|post)\b", re.I | re.S)
_REASONING = re.compile(r"\b(?:puzzle|riddle|logic(?:al)?|step by step|which of the following|deduce|"
                        r"if all|true or false|explain why)\b", re.I)


def by_rule(messages: list[dict]) -> str:
    users = [m["content"] for m in messages if m["role"] == "user"]
    if len(users) > 1:
        return "multiturn"
    text = "\n".join(m["content"] for m in messages)
    letters = [c for c in text if c.isalpha()]
    if letters and sum(not c.isascii() for c in letters) > 0.3 * len(letters):
        return "multilingual"
    for name, pattern in (("tool_use", _TOOLS), ("coding", _CODE), ("math", _MATH), ("writing", _WRITING),
                          ("reasoning", _REASONING)):
        if pattern.search(text):
            return name
    return "chat"
