"""What readers see: summary tables, figures, ASCII digits and the `gradlanes` command."""
