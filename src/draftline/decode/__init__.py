"""Decoding with a drafter: the chain and tree speculative decoders, prompt lookup, and the
benchmark stage that measures them against the target alone."""
