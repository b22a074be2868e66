"""Publishing images: OCI registries, E2B templates, Hugging Face; the published manifest."""
