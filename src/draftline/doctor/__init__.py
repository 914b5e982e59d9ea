"""`draftline doctor`: the gate before the GPU hours. On one or two rows of the pipeline's
own data it overfits a fresh drafter of the configured shape, exports it, reads the export
back as the engines do, and decodes with the benchmark's decoder and z-lab's
`dflash_generate`: every block must be fully accepted and the two must agree. When not, it
names the likely cause (diagnose.py)."""
