"""Prospect classifier: a custom handler built on ``model_step.ModelStep``."""
