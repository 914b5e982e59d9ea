"""The DFlash drafter: z-lab's architecture, our training recipe."""
