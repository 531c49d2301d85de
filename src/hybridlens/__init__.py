"""hybridlens: causal experiments on hybrid (linear + softmax attention) language models."""

__version__ = "0.1.0"
