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

import polars as pl

from .schema import MESSAGES

CATEGORIES = ["coding", "math", "reasoning", "writing", "chat", "multiturn", "multilingual", "tool_use", "safety"]

# Rust regex syntax (polars): case-insensitive, Unicode word boundaries and digits.
_TOOLS = r'(?i)"(?:functions|tools)"\s*:|\bfunction[_ ]call|\btool[_ ]call|\bavailable tools\b'
_CODE = (r"(?i)```|\b(?:python|javascript|typescript|java|c\+\+|rust|golang|sql|html|css|bash|regex|"
         r"function|class|method|compile[rd]?|debug|bug|code|script|api|algorithm|implement|program(?:ming)?|segfault|"
         r"def|return|array|string|integer)\b")
_MATH = (r"(?i)\d\s*[-+*/^=]\s*\d|\$[^$]+\$|\\frac|\b(?:solve|equation|integral|derivative|probability|"
         r"calculate|compute|sum of|product of|how many|how much|percent|remainder|prime|"
         r"triangle|polynomial|matrix)\b")
_WRITING = (r"(?is)\b(?:write|compose|draft|create)\b.{0,40}\b(?:story|poem|essay|letter|email|article|"
            r"blog|song|lyrics|script|speech|review|summary|paragraph|haiku|post)\b")
_REASONING = (r"(?i)\b(?:puzzle|riddle|logic(?:al)?|step by step|which of the following|deduce|"
              r"if all|true or false|explain why)\b")
_PATTERNS = [("tool_use", _TOOLS), ("coding", _CODE), ("math", _MATH), ("writing", _WRITING), ("reasoning", _REASONING)]


def rule(messages: str = "messages") -> pl.Expr:
    """The rule above over a column of messages, for a whole frame at once (in a lazy
    frame, so the text is joined once for every test)."""
    msgs = pl.col(messages)
    users = msgs.list.eval(pl.element().struct.field("role") == "user").list.sum()
    text = msgs.list.eval(pl.element().struct.field("content")).list.join("\n")
    # Letters as characters less non-letters: spaces and punctuation are the fewer matches.
    letters = text.str.len_chars() - text.str.count_matches(r"[^\p{L}]")
    foreign = text.str.count_matches(r"[\p{L}&&[^\x00-\x7F]]")
    expr = pl.when(users > 1).then(pl.lit("multiturn"))
    expr = expr.when((letters > 0) & (foreign > 0.3 * letters)).then(pl.lit("multilingual"))
    for name, pattern in _PATTERNS:
        expr = expr.when(text.str.contains(pattern)).then(pl.lit(name))
    return expr.otherwise(pl.lit("chat"))


def by_rule(messages: list[dict]) -> str:
    """The rule for one conversation (the same expression on a one-row frame)."""
    return pl.LazyFrame({"messages": [messages]}, schema={"messages": MESSAGES}).select(rule()).collect().item()
