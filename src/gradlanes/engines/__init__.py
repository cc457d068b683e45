"""Engines: what runs the captured program. One module per engine, each exporting an
`EnginePlugin` (`engines.base`) registered under the `gradlanes.engines` entry points; the training
loop, the config check and the agreement code find them through `engines.registry`."""
