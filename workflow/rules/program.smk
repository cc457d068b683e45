# Trace each distinct program once and keep it: jaxpr text, jax.export serialisation, SHA-256
# fingerprint (work/<experiment>/programs/<program>/, published with the experiment). Lanes prove they run it; IREE compiles its bytes.


rule capture_program:
    input:
        manifest=dataset_manifest(),
    output:
        manifest=WORK.program_manifest("{program}"),
    params:
        capture=capture_settings,
    log:
        log_path("capture_program/{program}.log"),
    script:
        "../scripts/capture_program.py"
