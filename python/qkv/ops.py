# SPDX-License-Identifier: MIT
"""The d2l building blocks on numpy arrays."""
