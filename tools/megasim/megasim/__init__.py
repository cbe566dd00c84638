"""megasim: a simulated Megatron-LM training job for recompshim (docs/megasim.md)."""
