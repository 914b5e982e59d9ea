"""Hidden states: the target run over the training sequences (stage `extract`), the
features the drafter reads, and the shard store training reads them from."""
