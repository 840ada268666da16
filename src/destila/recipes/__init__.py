"""Distillation recipes built from the library's stages: progressive (through smaller assistants) and
self-distillation ("born-again"). Each runs as resumable stages and writes a report, like ``destila demo``."""

from destila.recipes.common import RecipeSettings
from destila.recipes.progressive import ProgressiveRecipe
from destila.recipes.self_distill import SelfRecipe

__all__ = ["ProgressiveRecipe", "RecipeSettings", "SelfRecipe"]
