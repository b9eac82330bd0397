"""The fraud model's room: the artifact format and scoring (``fraud_model``), its training (``training``) and the
store of every version a query decided with, for replays (``model_store``).

The shipped artifact and its feature snapshots are package data in ``artifacts/fraud/``.
How to change the model: docs/changing-the-model.md.
"""
