"""The vocabularies of the prompt decoupler (jobs/policies/decoupling.py), which documents the rules
that read them. All are ours: drawn from DiffusionDB's first 500 prompts
(bench/data/prompts/diffusiondb-first-5k.txt) and the quality lab's caption templates
(lab/captions.py), whose shape, colour, size and texture words must stay out of SETTING_NOUNS,
POSITION_WORDS and STYLE_WORDS (a test checks it).
"""

from __future__ import annotations

from typing import Final


def _vocabulary(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Rule 3: "a <...> MEDIUM of ..." opens with how the image is made, not what it shows.
MEDIUMS: Final = _vocabulary(
    "painting paintings portrait portraits photo photograph photography picture image illustration "
    "drawing sketch render rendering artwork poster still screenshot shot closeup selfie sculpture "
    "depiction engraving etching woodcut print concept art photos pictures images"
)

# Rule 4: a phrase that starts the style tail wherever it stands in a clause.
TAIL_MARKERS: Final = tuple(
    tuple(marker.split())
    for marker in (
        "in the style of",
        "in style of",
        "style of",
        "trending on",
        "featured on",
        "artstation",
        "deviantart",
        "cgsociety",
        "cg society",
        "pixiv",
        "behance",
        "flickr",
        "pinterest",
        "octane",
        "houdini",
        "sidefx",
        "vray",
        "zbrush",
        "c4d",
        "unreal engine",
        "ray tracing",
        "raytracing",
        "highly detailed",
        "hyper detailed",
        "hyperdetailed",
        "ultra detailed",
        "extremely detailed",
        "hyperrealistic",
        "hyper realistic",
        "photorealistic",
        "ultra realistic",
        "sharp focus",
        "depth of field",
        "volumetric",
        "concept art",
        "digital art",
        "digital painting",
        "oil painting",
        "oil on canvas",
        "matte painting",
        "studio ghibli",
        "wide angle",
        "award winning",
        "masterpiece",
        "hdr",
        "uhd",
    )
)

# Rule 4: "by <name>" after one of these is an artist credit, after another "-ed" word a passive.
ART_VERBS: Final = _vocabulary(
    "painted drawn illustrated rendered photographed inspired created designed made sculpted "
    "directed shot animated generated influenced sketched colored coloured inked"
)

# Rule 4: a clause made only of these words is style ("epic 3d", "intricate", "smooth").
STYLE_WORDS: Final = _vocabulary(
    "intricate elegant smooth detailed detail details realistic realism cinematic epic dramatic "
    "moody vibrant colorful colourful sharp focus ultra hyper highly very extremely atmospheric "
    "atmosphere hd lifelike aesthetic dof bokeh fantasy sci fi scifi minimalist minimalism surreal "
    "surrealism impressionism impressionist expressionism renaissance baroque rococo anime manga "
    "cartoon vintage retro digital concept fine volumetric lighting light illustration portrait "
    "painting photo photograph render rendered art artwork poster wallpaper 3d 2d cgi cg high "
    "quality resolution beautiful stunning gorgeous amazing awesome trending popular cozy dark "
    "soft warm cold bright studio photography professional symmetrical symmetry ornate "
    "hyperrealism photorealism stylized stylised octane unreal gorgeous dynamic"
)

# Rule 4: a clause ending in one of these is style ("cinematic lighting", "movie still").
STYLE_HEADS: Final = _vocabulary(
    "painting art artwork lighting lightning light render rendering style aesthetic aesthetics "
    "photo photograph photography illustration technique detail details texture textures quality "
    "resolution masterpiece scheme palette shading lens engine graphics drawing sketch "
    "poster wallpaper composition colors colours tones effects still portrait movement "
    "impressionism expressionism surrealism realism"
)

# Rule 5: a scene preposition introduces a background when its noun phrase's head is a setting.
# Longer phrases first; "by" counts only before a determiner ("by the sea"; else a credit).
SCENE_PREPOSITIONS: Final = tuple(
    tuple(preposition.split())
    for preposition in (
        "surrounded by",
        "next to",
        "in",
        "on",
        "at",
        "under",
        "underneath",
        "beneath",
        "over",
        "above",
        "through",
        "across",
        "along",
        "inside",
        "within",
        "beside",
        "near",
        "against",
        "among",
        "amid",
        "amidst",
        "behind",
        "around",
        "outside",
        "into",
        "onto",
        "by",
    )
)

# Rule 5: heads that name where (not what): they read on through "of" ("in front of a wall").
POSITION_WORDS: Final = _vocabulary(
    "front back top bottom middle center centre edge side left right corner heart depths surface "
    "foot base end far part rest inside outskirts"
)

# Rule 5: heads that make a preposition's phrase a background (environments, places, times of day).
SETTING_NOUNS: Final = _vocabulary(
    "background backdrop scenery landscape setting environment "
    "moon space sky skies clouds cloud universe galaxy cosmos nebula planet mars earth orbit "
    "forest forests woods wood jungle rainforest beach sea ocean lake river pond waterfall stream "
    "shore coast harbor harbour port dock pier bay island desert dunes field fields meadow grass "
    "grassland prairie savanna garden park mountain mountains hill hills valley canyon cliff cave "
    "cavern volcano glacier tundra swamp marsh countryside wilderness wasteland ruins battlefield "
    "city town village street streets road alley highway avenue downtown suburb neighborhood "
    "neighbourhood market marketplace plaza courtyard rooftop rooftops skyline "
    "room kitchen bedroom bathroom livingroom hall hallway corridor office library church "
    "cathedral temple mosque castle palace house home mansion cabin hut apartment building "
    "school classroom hospital restaurant cafe bar pub shop store mall station subway train "
    "airport stadium arena studio stage theater theatre museum gallery farm barn factory "
    "warehouse lab laboratory prison dungeon tavern interior exterior "
    "spaceship spacecraft starship cockpit underwater water waves snow rain storm fog mist "
    "night sunset sunrise dawn dusk twilight midnight daylight moonlight "
    "table desk floor wall walls ground bed tree trees area world window maze fireplace"
)

# Rule 5: "background" and its synonym: the lab's only background nouns (lab/captions.py).
BACKGROUND_NOUNS: Final = frozenset({"background", "backdrop", "backgrounds", "backdrops"})

# Rule 5: words that end a noun phrase (besides the scene prepositions).
STOP_WORDS: Final = _vocabulary(
    "of with and or but while who which that where when as to for from like is are was were be "
    "being has have had while wearing holding"
)

# Rule 5: a background phrase reads on through these ("a classroom at night", "a city of glass").
CHAIN_WORDS: Final = _vocabulary(
    "of with in on at near under beside inside across along around behind among over above beneath through"
)

DETERMINERS: Final = _vocabulary(
    "a an the his her their its my our your this that these those some several many two three "
    "four five few one"
)
