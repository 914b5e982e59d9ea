"""Prompt data: sources read into one schema (stage `download`), then deduplicated,
decontaminated, weighted by category and split (stage `mix`)."""
