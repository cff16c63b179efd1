"""Pure policies: plain functions and classes with no I/O, one concept per module.

k_selection  similarity -> how many steps to skip (NIRVANA 5.3.1, MoDM 5.2)
eviction     which cached states to forget first (NIRVANA 5.4, MoDM 5.4, FlexCache 4.2.3)
predictor    will the vector search find a match? (NIRVANA 5.2)
decoupling   a video prompt's object and background phrases (FlexCache 4.2.1's text extractor)
video_hits   whole-prompt or object + background hit, its k, the states a run saves (FlexCache 4.2)
webhook_recovery  which waiting webhook deliveries to send now that their endpoint answers again
"""
