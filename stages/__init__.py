"""DVC stage entry points: `python -m stages.<name>`. Thin: paths in, library calls, files out."""
