"""LVLM evaluation (SOCO-LVLM): four-choice items in the Vis., Vis.+Desc. and Desc. settings, asked of a
vision-language model through an OpenAI-compatible server or a local transformers model, scored with
the official answer parser as average and circular accuracy. Plain Python, no Dagster."""
