"""The latent codecs, over one blob framing (framing): a latent, lossless by pcodec (latent, LatentBox
5), and a video entry's states, compressed as FlexCache 4.1 does (video)."""
