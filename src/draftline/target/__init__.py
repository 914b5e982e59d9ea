"""The target model: materialise it once (stage `target`), then load it in every later stage."""
