// A short English sample (prose, dialogue, numbers and a little code) that synthetic tokenizers
// learn its tokenizer's first merges from. Written for this project.
#ifndef LLM_WORKER_FRONTEND_SAMPLE_TEXT_H_
#define LLM_WORKER_FRONTEND_SAMPLE_TEXT_H_

namespace llm::frontend {

inline constexpr char kSampleText[] = R"TEXT(
Once upon a time, in a small town by the sea, there lived a girl named Mia. Every morning she
walked to the harbour with her dog, Pip, to watch the boats come in. The fishermen knew her
well. "Good morning, Mia!" they would call, and she would wave back and smile.
One day a storm came. The wind was strong and the waves were high. Mia and Pip stayed inside
and listened to the rain on the roof. When the storm was over, they ran down to the harbour to
see what had happened. A small boat had been washed onto the rocks, and an old man was sitting
beside it, looking sad.
"Are you hurt?" Mia asked. The old man shook his head. "No, but my boat is broken, and I do not
know how I will fix it." Mia thought for a moment. Then she said, "My father is a carpenter. He
can help you." The old man looked up and smiled for the first time that day.
They worked together for three days. Mia carried the tools, Pip kept watch, and her father cut
new boards for the hull. On the fourth day the boat was ready. The old man thanked them again
and again, and he promised to bring them the first fish he caught.
The service answers requests over the network. Each request carries a prompt, a limit on the
number of tokens to generate, and the settings for sampling: the temperature, top-k and top-p.
The server sends the answer back as a stream, one piece of text at a time, and the last message
says why the answer ended and how many tokens it used. When the client goes away, the work
stops at once and its memory is returned to the pool.
In 2024 the team measured 1,234 requests per second at a median latency of 56.7 ms, and the
99th percentile stayed under 120 ms. The price was $0.25 per million tokens; the budget for the
year was 3,500,000 tokens per day, or roughly 105 million tokens a month.
def generate(prompt, max_tokens=16):
    tokens = tokenize(prompt)
    for step in range(max_tokens):
        logits = model(tokens)
        next_token = sample(logits, temperature=0.7)
        if next_token == eos:
            break
        tokens.append(next_token)
    return detokenize(tokens)
for (int i = 0; i < n; ++i) { sum += values[i] * weights[i]; }
The quick brown fox jumps over the lazy dog. She said that it wasn't the first time, and they'll
see whether we've learned anything. I'm sure you'd agree: the results are what they are.
)TEXT";

}  // namespace llm::frontend

#endif  // LLM_WORKER_FRONTEND_SAMPLE_TEXT_H_
