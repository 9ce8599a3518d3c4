"""LVLM evaluation (SOCO-LVLM): four-choice items asked of a vision-language model, scored with the official
answer parser as average and circular accuracy. Plain Python, no Dagster."""
