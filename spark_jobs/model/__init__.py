"""The fraud model's room: the artifact format and scoring (``fraud_model``) and its training (``training``).

The artifact itself ships in ``models/fraud/``; how to change the model: docs/changing-the-model.md.
"""
