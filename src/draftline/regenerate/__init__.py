"""Regeneration: the target answers every training prompt, turn by turn."""
