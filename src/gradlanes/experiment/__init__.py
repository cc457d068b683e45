"""What is trained: models, losses, optimizers, the batch order, and a lane's resolved experiment.

Kept free of imports here so that `gradlanes.experiment.naming` stays importable without JAX (the
Snakefile imports it on every `snakemake` call).
"""
