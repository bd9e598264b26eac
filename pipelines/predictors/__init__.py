"""Predictors: train the kernel and collective predictors of a GPU, register them, move the champion."""
