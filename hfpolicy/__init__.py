"""hfpolicy: learn robot policies from demonstrations, with the Hugging Face Hub as home for data and models."""

__version__ = "0.1.0"
