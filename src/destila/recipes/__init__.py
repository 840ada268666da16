"""Distillation recipes built from the library's stages: progressive (through smaller assistants),
self-distillation ("born-again") and on-policy rounds. Each runs as resumable stages and writes a report, like ``destila demo``."""

from destila.recipes.common import RecipeSettings
from destila.recipes.on_policy import OnPolicyRecipe, OnPolicySettings
from destila.recipes.progressive import ProgressiveRecipe
from destila.recipes.self_distill import SelfRecipe

__all__ = ["OnPolicyRecipe", "OnPolicySettings", "ProgressiveRecipe", "RecipeSettings", "SelfRecipe"]
