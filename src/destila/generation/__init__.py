"""Teacher-generated data: answers to prompts, written as conversations (``destila generate``)."""

from destila.generation.run import GenerateReport, GenerateSpec, SamplingSpec, generate

__all__ = ["GenerateReport", "GenerateSpec", "SamplingSpec", "generate"]
