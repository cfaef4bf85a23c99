"""The analysis's stages, one module per stage."""
