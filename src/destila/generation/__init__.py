"""Teacher-generated data: answers to prompts, written as conversations (``destila generate``)."""

from destila.generation.run import GenerateReport, GenerateSpec, generate

__all__ = ["GenerateReport", "GenerateSpec", "generate"]
