"""The fraud model's room: the artifact format and scoring (``fraud_model``) and its training (``training``).

The shipped artifact and its feature snapshots are package data in ``artifacts/fraud/``.
How to change the model: docs/changing-the-model.md.
"""
