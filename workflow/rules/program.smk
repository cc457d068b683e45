# Trace each distinct program once and keep it: jaxpr text, jax.export serialisation, SHA-256
# fingerprint (results/programs/<program>/). Lanes prove they run it; IREE compiles its bytes.


rule capture_program:
    input:
        manifest=dataset_manifest(),
    output:
        manifest="results/programs/{program}/program.json",
    params:
        capture=capture_settings,
    log:
        "logs/capture_program/{program}.log",
    script:
        "../scripts/capture_program.py"
