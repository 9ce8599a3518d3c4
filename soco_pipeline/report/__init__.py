"""Looking at results: output formats, prediction panels, LVLM examples and the static results page."""
