"""IAWP: stage profiles, the STDM, NCF interference models, node schedulers and the executor."""
