"""The captured program: tracing the train step once, its committed artifact, and the host
interpreter that evaluates it (the JAX-version differences live in `program.jaxcompat` alone)."""
