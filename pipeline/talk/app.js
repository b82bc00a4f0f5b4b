// The talk page: microphone -> AudioWorklet (16 kHz PCM16, 20 ms frames) -> websocket;
// agent PCM16 from the websocket -> a small jitter buffer -> speakers; events -> the page.
// Protocol: PROTOCOL.md beside this file. `window.parleyStats` is read by the browser test.
"use strict";

(() => {
  const INPUT_RATE = 16000;
  const FRAME_SAMPLES = 320; // 20 ms at 16 kHz
  // Playback starts this far ahead of the clock and is rebuilt after an underrun: frames come
  // paced in real time, so 60 ms absorbs network and event-loop jitter at little delay.
  const JITTER_S = 0.06;

  const $ = (id) => document.getElementById(id);
  const stats = {
    framesSent: 0, maxInputRms: 0, framesReceived: 0, framesPlayed: 0, playbackRms: 0, maxPlaybackRms: 0,
    interrupts: 0, framesCut: 0, events: 0, outputRate: null, closeCode: null, closeReason: "",
  };
  window.parleyStats = stats;

  let ws = null, ctx = null, micStream = null, capture = null, playGain = null, analyser = null;
  let ready = false, playHead = 0, meterTimer = null;
  let sessionNo = 0; // turns restart at 1 in each session: blocks are keyed by both
  const playing = new Set();

  function token() {
    const m = /(?:^|&)token=([^&]*)/.exec(location.hash.slice(1));
    return m ? decodeURIComponent(m[1]) : "";
  }

  function setChip(id, text, kind) {
    const chip = $(id);
    chip.textContent = text;
    chip.className = "chip" + (kind ? " " + kind : "");
  }

  function showError(text) {
    $("error").textContent = text;
    $("error").hidden = !text;
  }

  // -- turns: one block per turn with the user's words, the reply and the budget chart ---

  function turnBlock(turn) {
    const key = `${sessionNo}:${turn}`;
    let block = document.querySelector(`.turn[data-key="${key}"]`);
    if (block) return block;
    block = document.createElement("article");
    block.className = "turn";
    block.dataset.key = key;
    block.dataset.turn = String(turn);
    block.innerHTML = '<p class="user"><span class="who">You</span> <span class="utt interim"></span></p>' +
      '<p class="agent"><span class="who">Parley</span> <span class="reply"></span></p>';
    block.appendChild(document.createElementNS(window.ParleyBudgetChart.NS, "svg")).setAttribute("class", "budget");
    $("turns").prepend(block);
    return block;
  }

  function onEvent(msg) {
    stats.events++;
    switch (msg.type) {
      case "hello":
        stats.outputRate = msg.sample_rate;
        ready = true;
        setChip("status", "connected", "ok");
        break;
      case "state":
        setChip("agent-state", `agent ${msg.agent}`, msg.agent === "listening" ? "" : "busy");
        break;
      case "vad":
        setChip("vad", msg.speaking ? "you: speaking" : "you: quiet", msg.speaking ? "ok" : "");
        break;
      case "transcript": {
        const utt = turnBlock(msg.turn).querySelector(".utt");
        utt.textContent = msg.text;
        utt.className = "utt " + (msg.final ? "final" : "interim");
        break;
      }
      case "reply": {
        const reply = turnBlock(msg.turn).querySelector(".reply");
        reply.textContent = msg.text;
        reply.className = "reply " + (msg.final ? "final" : "partial");
        break;
      }
      case "interrupt":
        stats.framesCut += playing.size; // scheduled or sounding when the user spoke over them
        stopPlayback();
        stats.interrupts++;
        turnBlock(msg.turn).classList.add("interrupted");
        break;
      case "budget":
        $("budget-ms").textContent = String(Math.round(msg.budget_ms));
        window.ParleyBudgetChart.render(turnBlock(msg.turn).querySelector("svg.budget"), msg);
        break;
      case "error":
        showError(msg.message);
        break;
      default: // newer servers may add events: ignore them
    }
  }

  // -- agent audio ------------------------------------------------------------------------

  function playFrame(data) {
    stats.framesReceived++;
    if (!ctx || !ready || data.byteLength < 2) return;
    const view = new DataView(data);
    const n = data.byteLength >> 1;
    const samples = new Float32Array(n);
    for (let i = 0; i < n; i++) samples[i] = view.getInt16(2 * i, true) / 32768;
    const buffer = ctx.createBuffer(1, n, stats.outputRate);
    buffer.copyToChannel(samples, 0);
    const src = ctx.createBufferSource();
    src.buffer = buffer;
    src.connect(playGain);
    const now = ctx.currentTime;
    if (playHead < now + 0.005) playHead = now + JITTER_S; // start, or an underrun: rebuild the lead
    src.start(playHead);
    playHead += buffer.duration;
    playing.add(src);
    src.onended = () => {
      if (playing.delete(src)) stats.framesPlayed++;
    };
  }

  function stopPlayback() {
    for (const src of playing) {
      src.onended = null;
      try { src.stop(); } catch (err) { /* never started: nothing to stop */ }
      src.disconnect();
    }
    playing.clear();
    playHead = 0;
  }

  function watchLevels() {
    const buf = new Float32Array(analyser.fftSize);
    meterTimer = setInterval(() => {
      analyser.getFloatTimeDomainData(buf);
      let energy = 0;
      for (const v of buf) energy += v * v;
      stats.playbackRms = Math.sqrt(energy / buf.length);
      stats.maxPlaybackRms = Math.max(stats.maxPlaybackRms, stats.playbackRms);
    }, 50);
  }

  // -- microphone and socket ------------------------------------------------------------

  function sendFrame(msg) {
    stats.maxInputRms = Math.max(stats.maxInputRms, msg.rms);
    $("level").style.width = `${Math.min(100, Math.round(400 * msg.rms))}%`;
    if (!ws || ws.readyState !== WebSocket.OPEN || !ready) return;
    ws.send(msg.pcm);
    stats.framesSent++;
  }

  function connect() {
    sessionNo++;
    const t = token();
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    ws = new WebSocket(`${proto}//${location.host}/ws` + (t ? `?token=${encodeURIComponent(t)}` : ""));
    ws.binaryType = "arraybuffer";
    ws.onopen = () => {
      ws.send(JSON.stringify({ type: "hello", sample_rate: INPUT_RATE, encoding: "pcm_s16le", channels: 1 }));
    };
    ws.onmessage = (e) => (typeof e.data === "string" ? onEvent(JSON.parse(e.data)) : playFrame(e.data));
    ws.onclose = (e) => {
      stats.closeCode = e.code;
      stats.closeReason = e.reason;
      ws = null;
      setChip("status", `closed ${e.code}${e.reason ? ": " + e.reason : ""}`, e.code === 1000 ? "" : "bad");
      if (e.code !== 1000) showError(`connection closed (${e.code}) ${e.reason || ""}`);
      stop();
    };
  }

  async function start() {
    $("talk").disabled = true;
    showError("");
    try {
      ctx = new AudioContext({ latencyHint: "interactive" });
      await ctx.audioWorklet.addModule("/capture-worklet.js");
      micStream = await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true, autoGainControl: true },
      });
      playGain = ctx.createGain();
      analyser = ctx.createAnalyser();
      analyser.fftSize = 1024;
      playGain.connect(ctx.destination);
      playGain.connect(analyser);
      capture = new AudioWorkletNode(ctx, "parley-capture", {
        numberOfInputs: 1, numberOfOutputs: 1, outputChannelCount: [1],
        processorOptions: { outRate: INPUT_RATE, frameSamples: FRAME_SAMPLES },
      });
      capture.port.onmessage = (e) => sendFrame(e.data);
      const mute = ctx.createGain(); // keeps the worklet pulled by the graph, silently
      mute.gain.value = 0;
      ctx.createMediaStreamSource(micStream).connect(capture);
      capture.connect(mute).connect(ctx.destination);
      await ctx.resume();
      watchLevels();
      setChip("status", "connecting", "busy");
      connect();
      $("stop").disabled = false;
    } catch (err) {
      showError(`cannot start: ${err.message || err}`);
      stop();
    }
  }

  function stop() {
    if (ws) ws.close(1000, "user stopped");
    stopPlayback();
    if (meterTimer) clearInterval(meterTimer);
    if (micStream) for (const track of micStream.getTracks()) track.stop();
    if (ctx) ctx.close();
    ws = ctx = micStream = capture = playGain = analyser = meterTimer = null;
    ready = false;
    $("level").style.width = "0";
    $("talk").disabled = false;
    $("stop").disabled = true;
  }

  $("talk").addEventListener("click", start);
  $("stop").addEventListener("click", stop);
})();
