# SPDX-License-Identifier: MIT
"""qkv.train and qkv.train_lm."""


def train(*args, **kwargs):
    raise NotImplementedError


def train_lm(*args, **kwargs):
    raise NotImplementedError
