"""Reading and writing what hfpolicy keeps on disk: atomic files and folders, the run folder's lock, tensor trees in
safetensors + JSON, mp4 video, and the one-line causes of failed Hub transfers."""
