"""Training data for the EAGLE head: text the target itself generates, with its features.

Seeded voice-assistant chats (one or two user turns; the second turn follows the target's own
first reply), answered by our engine (batched `LLMEngine.generate`, alternately greedy and
sampled at T=0.7 with per-request seeds), then one prefill pass per finished chat through
`EngineTarget` records the pre-norm feature of every position. The replies may come from a
faster engine than the features (bf16 weights in batches of 8, the fused CPU path: 250 tok/s
against fp32's 133-156 measured side by side); the features always come from `feature_engine`
(fp32), so the head learns the fp32 target's map on text that the target (nearly) writes. Disjoint from the benchmark
prompts (benchmarks/data/voice_prompts.json): different templates and fillers.
"""

from __future__ import annotations

import random
import time

import torch

SYSTEM = "You are a helpful voice assistant. Answer in one or two short spoken sentences."
_ASKS = [
    # tasks the reply tends to restate
    "Set a timer for {n} minutes.", "Set an alarm for {n} {ampm} and label it {label}.",
    "Remind me to call {p} at {n} {ampm}.", "Remind me on {day} to {chore}.",
    "Add {f2} to my shopping list.", "Put {f2} and {f3} on the grocery list.",
    "Text {p} that I will be there in {n} minutes.", "Send an email to {p} saying {msg}.",
    "Book a table for {n} at {rest} on {day}.", "Turn the {room} lights {o}.",
    "Set the thermostat to {n2} degrees.", "Play some {g} music in the {room}.",
    "Schedule a meeting with {p} on {day} at {n} {ampm}.", "Cancel my {chore} reminder.",
    "Call {p}.", "What's on my calendar for {day}?", "Read me my last message from {p}.",
    # open questions
    "What's the weather like in {c} today?", "How do I make {f}?", "Tell me a fun fact about {a}.",
    "What time is it in {c}?", "Can you recommend a good book about {t}?",
    "How far is {c} from {c2}?", "Explain {t} in simple terms.", "Why is the sky blue?",
    "What should I cook for dinner with {f2}?", "Give me a quick tip for {t2}.",
    "How many legs does a {a1} have?", "Translate '{phrase}' into {l}.", "What is {n} times {n2}?",
    "Write a short poem about {a}.", "Who was {p2}?", "How do I get better at {t2}?",
    "What are the benefits of {t2}?", "Can you summarize the plot of {b}?",
    "What's the difference between {t} and {t3}?", "How does {t} work?", "Is it healthy to {habit}?",
    "What can I do on a rainy day in {c}?", "Why do {a} {verb}?", "How long should I {cook} {f4}?",
    "What's a good name for a {pet}?", "Tell me a joke about {a}.", "How do I stop {habit2}?",
    "What's the capital of {country}?", "How do I say thank you in {l}?",
    "Suggest a quick workout I can do at home.", "What should I pack for a trip to {c}?",
    "How can I be more productive at work?", "What's a healthy breakfast idea?",
    # added with the 4x data (2,560 chats): more request shapes, small talk and multi-part asks
    "Start a {n} minute countdown for the {dish}.", "Wake me up at {n} {ampm} on {day}.",
    "Move my {event} with {p} to {day} at {n} {ampm}.", "Note that the {thing} code is {code}.",
    "Add {chore} to my to-do list for {day}.", "Order more {f3} from the usual store.",
    "Tell {p} I'm running {n} minutes behind.", "Lock the front door and turn off the {room} lights.",
    "Dim the {room} lights to {pct} percent.", "Turn up the volume to {pct} percent.",
    "Pause the music.", "Skip this song.", "What's the score of the {team} game?",
    "How long will it take to drive to {c2}?", "Find a {shop} near me that's open now.",
    "What's the exchange rate from dollars to {cur}?", "Convert {n2} {unit} to {unit2}.",
    "How many {unit2} are in a {unit3}?", "Spell the word {word}.", "What does {word} mean?",
    "Give me a synonym for {adj}.", "Flip a coin.", "Pick a random number between one and {n2}.",
    "What day of the week is {date}?", "How many days until {holiday}?",
    "What's the best way to clean {surface}?", "My {device} won't turn on, what should I try?",
    "How do I reset my {device}?", "What's a good gift for {p3}?", "Plan a {n} day trip to {c}.",
    "Recommend a {g} song for {mood} evenings.", "What movie should I watch tonight?",
    "Tell me something interesting about {c}.", "What's the tallest {landmark} in the world?",
    "How do {a} communicate?", "How do I take care of a {plant}?", "When should I plant {veg}?",
    "How much water should I drink a day?", "Help me stretch my {body} after running.",
    "I feel {feel}, any advice?", "I'm bored, what can I do?", "Good morning! What's the plan for today?",
    "How are you today?", "Thank you, that's all for now.", "Quiz me on {subject}.",
    "Teach me one word in {l}.", "Read me a short bedtime story about {a1}s.",
    "What's {n2} percent of {n3}?", "How do I calculate a tip on {n3} dollars?",
    "Remind me to take my {med} every morning.", "Check if I have any meetings after {n} {ampm}.",
]
_FOLLOW = [
    "Thanks. And what about {t}?", "Can you make it shorter?", "Okay, and for {day}?",
    "What else should I know?", "Actually, change it to {n} {ampm}.", "Why is that?",
    "Great, add {f3} too.", "And how about in {c2}?", "Can you give me another one?",
    "Sorry, I meant {day}.", "Make that {n2} instead.", "Can you say that again more slowly?",
    "Perfect, thanks!", "What would you suggest instead?", "Is that expensive?", "And for {p}?",
]
_FILL = {
    "c": ["Paris", "Tokyo", "Chicago", "Berlin", "Sydney", "Toronto", "Madrid", "Cairo", "Denver",
          "Lisbon", "Mumbai", "Seattle"],
    "c2": ["London", "Rome", "Boston", "Seoul", "Lima", "Oslo", "Dublin", "Austin"],
    "n": ["5", "10", "3", "7", "12", "20", "4", "six", "eight", "fifteen", "45"],
    "n2": ["6", "8", "9", "11", "15", "68", "72"], "ampm": ["am", "pm"],
    "p": ["mom", "Sarah", "the dentist", "my boss", "Alex", "Priya", "David", "grandma", "Luis"],
    "p2": ["Marie Curie", "Albert Einstein", "Ada Lovelace", "Leonardo da Vinci", "Nikola Tesla",
           "Frida Kahlo", "Isaac Newton", "Rosa Parks"],
    "f": ["pancakes", "guacamole", "a smoothie", "fried rice", "tomato soup", "an omelette",
          "banana bread", "a grilled cheese sandwich", "lemonade"],
    "f2": ["chicken and rice", "pasta", "eggs", "milk and bread", "potatoes", "apples", "spinach",
           "greek yogurt", "black beans"],
    "f3": ["bananas", "olive oil", "peanut butter", "tortillas", "orange juice", "butter"],
    "f4": ["an egg", "rice", "salmon", "broccoli", "a steak", "pasta"],
    "cook": ["boil", "bake", "steam", "grill"],
    "a": ["octopuses", "cats", "penguins", "elephants", "bees", "dolphins", "owls", "sharks",
          "giraffes", "ants"],
    "a1": ["spider", "insect", "horse", "bird", "crab", "starfish"],
    "verb": ["sleep so much", "migrate", "purr", "hibernate", "sing"],
    "t": ["black holes", "photosynthesis", "the stock market", "machine learning", "volcanoes",
          "the internet", "gravity", "climate change", "vaccines", "electricity", "the moon's phases",
          "earthquakes", "inflation"],
    "t3": ["weather", "bacteria", "a virus", "an atom", "a comet"],
    "t2": ["sleep", "running", "public speaking", "saving money", "meditation", "learning piano",
           "cooking", "staying focused", "drinking more water"],
    "habit": ["skip breakfast", "drink coffee every day", "nap in the afternoon", "run every day"],
    "habit2": ["snoring", "procrastinating", "biting my nails", "checking my phone so much"],
    "g": ["jazz", "classical", "rock", "lo-fi", "pop", "country", "reggae"],
    "l": ["Spanish", "French", "German", "Italian", "Japanese"],
    "phrase": ["good morning", "where is the station", "see you tomorrow", "how much is this"],
    "b": ["Romeo and Juliet", "The Hobbit", "Moby Dick", "Pride and Prejudice", "Frankenstein"],
    "o": ["on", "off"], "room": ["living room", "kitchen", "bedroom", "office"],
    "day": ["Monday", "Friday", "Saturday", "tomorrow", "next Tuesday"],
    "chore": ["water the plants", "take out the trash", "pay the rent", "renew my passport"],
    "label": ["gym", "medicine", "meeting", "wake up"], "pet": ["puppy", "kitten", "goldfish"],
    "msg": ["the report is ready", "lunch is moved to noon", "thanks for the help"],
    "rest": ["an Italian restaurant", "the sushi place", "a steakhouse"],
    "country": ["Canada", "Australia", "Kenya", "Peru", "Norway"],
    "dish": ["pizza", "cookies", "rice", "tea", "roast chicken"],
    "event": ["meeting", "lunch", "call", "appointment", "coffee"],
    "thing": ["garage", "wifi", "gate", "locker"], "code": ["4 7 1 9", "2 2 0 5", "seven eight one"],
    "pct": ["20", "35", "50", "80", "fifty"], "team": ["Lakers", "Yankees", "Arsenal", "Chiefs"],
    "shop": ["pharmacy", "coffee shop", "gas station", "hardware store", "bakery"],
    "cur": ["euros", "yen", "pounds", "pesos"],
    "unit": ["miles", "pounds", "cups", "degrees Fahrenheit", "ounces"],
    "unit2": ["kilometers", "kilograms", "milliliters", "degrees Celsius", "grams"],
    "unit3": ["mile", "pound", "gallon", "foot"],
    "word": ["serendipity", "necessary", "ephemeral", "rhythm", "quarantine"],
    "adj": ["happy", "big", "tired", "fast", "important"],
    "date": ["July fourth", "Christmas Day", "the first of May", "March tenth"],
    "holiday": ["Christmas", "Halloween", "New Year's Day", "Thanksgiving", "my birthday on the 9th"],
    "surface": ["a cast iron pan", "hardwood floors", "a glass stovetop", "white sneakers"],
    "device": ["laptop", "phone", "router", "smart speaker", "tablet"],
    "p3": ["my dad", "a coworker", "my sister", "a ten year old", "my neighbor"],
    "mood": ["quiet", "rainy", "happy", "lazy"], "landmark": ["building", "mountain", "waterfall", "bridge"],
    "plant": ["succulent", "basil plant", "fern", "orchid", "snake plant"],
    "veg": ["tomatoes", "carrots", "garlic", "lettuce"], "body": ["calves", "hamstrings", "back", "hips"],
    "feel": ["stressed", "tired", "nervous about an interview", "a bit lonely"],
    "subject": ["world capitals", "the planets", "basic math", "animal facts", "US history"],
    "n3": ["40", "64", "120", "250", "85"], "med": ["vitamins", "allergy pill", "medicine"],
}


def _fill(rng: random.Random, s: str) -> str:
    for key in sorted(_FILL, key=len, reverse=True):  # "n2" before "n"
        while "{" + key + "}" in s:
            s = s.replace("{" + key + "}", rng.choice(_FILL[key]), 1)
    return s


def training_chats(n: int, seed: int) -> list[tuple[list[dict], str | None]]:
    """-> n seeded (first-turn messages, follow-up question or None); every third has a follow-up."""
    rng = random.Random(seed)
    chats = []
    for i in range(n):
        msgs = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": _fill(rng, rng.choice(_ASKS))}]
        chats.append((msgs, _fill(rng, rng.choice(_FOLLOW)) if i % 3 == 2 else None))
    return chats


def self_queries(engine, n: int, seed: int, batch: int = 32, max_tokens: int = 48) -> list[str]:
    """n user requests the target writes itself (Magpie, Xu et al. 2024): sampled (T=0.8,
    top-p 0.95, per-sample seeds) from the chat template up to an open user turn, after
    SYSTEM; kept when the turn ends within max_tokens on one line of 3-40 words (about half
    of the samples at 48 tokens). Why: the templates' replies did not carry over to other questions; the head
    agreed 0.63 with the target on held-out template chats but 0.33-0.41 on the benchmark's
    open explanations (teacher-forced, fp32)."""
    from llm_engine import SamplingParams

    sys_msg = {"role": "system", "content": SYSTEM}
    a = engine.encode_chat([sys_msg, {"role": "user", "content": "Hello"}])
    b = engine.encode_chat([sys_msg, {"role": "user", "content": "Goodbye"}])
    prefix = a[: next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)]  # ... user turn opened
    out: list[str] = []
    t0, drawn = time.time(), 0
    while len(out) < n:
        params = [SamplingParams(max_tokens=max_tokens, temperature=0.8, top_p=0.95, seed=seed + drawn + j)
                  for j in range(batch)]
        drawn += batch
        for o in engine.generate([prefix] * batch, params):
            ids = list(o.token_ids)
            text = engine.tokenizer.decode(ids).strip()
            if ids and ids[-1] in engine.eos_token_ids and "\n" not in text and 3 <= len(text.split()) <= 40:
                out.append(text)
        print(f"queries {min(len(out), n)}/{n} from {drawn} samples, {time.time() - t0:.0f}s", flush=True)
    return out[:n]


def query_chats(queries: list[str]) -> list[tuple[list[dict], str | None]]:
    """Single-turn chats for training_chats' format."""
    return [([{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}], None) for q in queries]


def _answer(engine, convs: list[list[dict]], max_new: int, seed: int, sample: bool) -> list[list[int]]:
    from llm_engine import SamplingParams

    params = [SamplingParams(max_tokens=max_new, temperature=0.7 if sample else 0.0, seed=seed + j)
              for j in range(len(convs))]
    return [list(o.token_ids) for o in engine.chat(convs, params)]


def generate_data(engine, chats: list[tuple[list[dict], str | None]], max_new: int, seed: int, batch: int = 8,
                  skip: int = 0, feature_engine=None) -> dict:
    """tokens [T] int64, pre-norm features [T, D] fp16 and the final reply's start, per chat
    of `chats` (training_chats' format); skip: chats already generated (a multiple of batch),
    to resume a partial data cache; engine writes the replies, feature_engine (default:
    engine) records the features."""
    from llm_engine.speculative.engine_target import EngineTarget

    target = EngineTarget(feature_engine or engine)
    toks, feats, starts = [], [], []
    t0 = time.time()
    for i in range(skip, len(chats), batch):
        part = chats[i : i + batch]
        sample = (i // batch) % 2 == 1
        convs = [m for m, _ in part]
        replies = _answer(engine, convs, max_new, seed + i, sample)
        second = [j for j, (_, f) in enumerate(part) if f is not None]
        for j in second:
            text = engine.tokenizer.decode([t for t in replies[j] if t not in engine.eos_token_ids]).strip()
            convs[j] = [*convs[j], {"role": "assistant", "content": text},
                        {"role": "user", "content": part[j][1]}]
        if second:
            more = _answer(engine, [convs[j] for j in second], max_new, seed + i + batch, sample)
            for j, r in zip(second, more):
                replies[j] = r
        for j, conv in enumerate(convs):
            prompt = engine.encode_chat(conv)
            ids = prompt + replies[j]
            starts.append(len(prompt))
            f, _ = target.extend("data", ids)  # [T, D] pre-norm features
            target.release("data")
            toks.append(torch.tensor(ids))
            feats.append(f.half().clone())
        print(f"data {i + len(part)}/{len(chats)} chats, {sum(len(t) for t in toks)} tokens, "
              f"{time.time() - t0:.0f}s", flush=True)
    return {"tokens": toks, "features": feats, "reply_start": starts}
