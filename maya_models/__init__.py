"""maya_models."""
