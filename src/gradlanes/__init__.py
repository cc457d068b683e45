"""gradlanes: one captured JAX gradient, run on several engines, compared by accuracy and cost."""

__version__ = "0.1.0"
