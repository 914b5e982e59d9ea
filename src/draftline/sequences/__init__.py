"""Training sequences: each regenerated conversation through the chat template, with the
loss mask on what the target wrote (stage `tokenize`)."""
