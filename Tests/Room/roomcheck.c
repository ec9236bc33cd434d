/*
 * roomcheck: checks the room plugin the way Linnet uses a sound card, independently of
 * Linnet. Two threads (speaker, microphone) run at once on two PCMs of one room:
 *
 * 1. Delay contract. The speaker thread writes a click every 250 ms; just before each
 *    write snd_pcm_delay says when its first frame will be heard (now + delay). The
 *    microphone thread reads; right after each read snd_pcm_delay says when the first
 *    frame read was digitized (now − (delay + n)). Each click's echo, found by matched
 *    filtering, must arrive `echo_delay_ms` after the click was heard (within 0.25 ms):
 *    this is what an echo canceller aligning by device clocks relies on.
 * 2. Underrun: the speaker thread stops writing for 3 buffers once; the write after it
 *    must fail with -EPIPE (and snd_pcm_recover must bring the stream back).
 * 3. Flush: a click is queued and snd_pcm_drop + snd_pcm_prepare called before it is
 *    heard; no echo of it may reach the microphone.
 * 4. Clock: frames captured against CLOCK_MONOTONIC elapsed, within 2 periods.
 *
 * Usage: roomcheck PLAYBACK_PCM CAPTURE_PCM ECHO_DELAY_MS [SECONDS]
 * Prints one JSON line with the figures; exit 0 when every check passed, 1 otherwise.
 */
#define _GNU_SOURCE
#include <alsa/asoundlib.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RATE 48000
#define PERIOD 480
#define PERIODS 4
#define CLICK 96

static double seconds = 4;
static int64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int16_t click_wave[CLICK];

static snd_pcm_t *open_pcm(const char *name, snd_pcm_stream_t stream)
{
	snd_pcm_t *h;
	int e = snd_pcm_open(&h, name, stream, 0);
	if (e < 0) {
		fprintf(stderr, "roomcheck: open %s: %s\n", name, snd_strerror(e));
		exit(2);
	}
	snd_pcm_hw_params_t *hw;
	snd_pcm_hw_params_alloca(&hw);
	snd_pcm_hw_params_any(h, hw);
	snd_pcm_hw_params_set_access(h, hw, SND_PCM_ACCESS_RW_INTERLEAVED);
	snd_pcm_hw_params_set_format(h, hw, SND_PCM_FORMAT_S16_LE);
	snd_pcm_hw_params_set_channels(h, hw, 1);
	snd_pcm_hw_params_set_rate(h, hw, RATE, 0);
	snd_pcm_uframes_t p = PERIOD, b = PERIOD * PERIODS;
	snd_pcm_hw_params_set_period_size_near(h, hw, &p, NULL);
	snd_pcm_hw_params_set_buffer_size_near(h, hw, &b);
	if ((e = snd_pcm_hw_params(h, hw)) < 0) {
		fprintf(stderr, "roomcheck: hw_params %s: %s\n", name, snd_strerror(e));
		exit(2);
	}
	snd_pcm_sw_params_t *sw;
	snd_pcm_sw_params_alloca(&sw);
	snd_pcm_sw_params_current(h, sw);
	snd_pcm_sw_params_set_avail_min(h, sw, p);
	snd_pcm_sw_params_set_start_threshold(h, sw, stream == SND_PCM_STREAM_PLAYBACK ? 2 * p : 1);
	snd_pcm_sw_params(h, sw);
	return h;
}

/* speaker side */
static snd_pcm_t *spk;
static int64_t click_heard[256];
static int nclicks;
static int64_t flushed_click_heard = -1;
static int underrun_seen, underrun_recovered;

static void *speaker(void *arg)
{
	(void)arg;
	int16_t buf[PERIOD];
	int64_t written = 0, start = now_ns();
	int stalled = 0, flushed = 0;
	int64_t quiet_until = 0; /* no regular click near the flushed one: it must stay alone */
	while (now_ns() - start < (int64_t)(seconds * 1e9)) {
		double t = (now_ns() - start) / 1e9;
		memset(buf, 0, sizeof buf);
		snd_pcm_sframes_t delay = 0;
		int64_t before = now_ns();
		int have_delay = snd_pcm_delay(spk, &delay) == 0;
		int64_t at = before + (have_delay ? delay : 0) * 1000000000LL / RATE;
		int clicked = 0;
		if (written > 0 && written % (RATE / 4) < PERIOD && nclicks < 256 && have_delay && written > quiet_until &&
		    snd_pcm_state(spk) == SND_PCM_STATE_RUNNING) {
			memcpy(buf + 100, click_wave, sizeof click_wave);
			clicked = 1;
		}
		if (!flushed && t > seconds * 0.75 && written % (RATE / 4) > RATE / 8 && have_delay && snd_pcm_state(spk) == SND_PCM_STATE_RUNNING) {
			/* 3: queue a click, then flush it before it can be heard */
			memcpy(buf + 100, click_wave, sizeof click_wave);
			snd_pcm_sframes_t n = snd_pcm_writei(spk, buf, PERIOD);
			if (n == PERIOD) {
				flushed_click_heard = at + 100 * 1000000000LL / RATE;
				snd_pcm_drop(spk);
				snd_pcm_prepare(spk);
			}
			flushed = 1;
			written += PERIOD;
			quiet_until = written + RATE / 2;
			continue;
		}
		if (!stalled && t > seconds * 0.5) {
			/* 2: stop writing for three buffers */
			stalled = 1;
			struct timespec ts = { 0, 3 * PERIODS * PERIOD * (1000000000L / RATE) };
			nanosleep(&ts, NULL);
			snd_pcm_sframes_t n = snd_pcm_writei(spk, buf, PERIOD);
			if (n == -EPIPE) {
				underrun_seen = 1;
				if (snd_pcm_recover(spk, (int)n, 1) == 0 && snd_pcm_writei(spk, buf, PERIOD) == PERIOD)
					underrun_recovered = 1;
			}
			written += PERIOD;
			continue;
		}
		snd_pcm_sframes_t n = snd_pcm_writei(spk, buf, PERIOD);
		if (n < 0) {
			snd_pcm_recover(spk, (int)n, 1);
			continue;
		}
		if (clicked)
			click_heard[nclicks++] = at + 100 * 1000000000LL / RATE;
		written += n;
	}
	snd_pcm_drop(spk);
	return NULL;
}

/* microphone side */
static snd_pcm_t *mic;
static int16_t *rec;
static int64_t *rec_time; /* digitized time of each period's first frame */
static size_t rec_len, rec_cap;
static int64_t cap_start_ns, cap_end_ns;
static int64_t cap_frames;

static void *microphone(void *arg)
{
	(void)arg;
	int16_t buf[PERIOD];
	int64_t start = now_ns();
	while (now_ns() - start < (int64_t)((seconds + 0.5) * 1e9)) {
		snd_pcm_sframes_t n = snd_pcm_readi(mic, buf, PERIOD);
		if (n < 0) {
			snd_pcm_recover(mic, (int)n, 1);
			continue;
		}
		snd_pcm_sframes_t delay = 0;
		int64_t t = now_ns();
		snd_pcm_delay(mic, &delay);
		if (cap_frames == 0)
			cap_start_ns = t - (int64_t)(delay + n) * 1000000000LL / RATE;
		cap_frames += n;
		cap_end_ns = t - (int64_t)delay * 1000000000LL / RATE;
		if (rec_len + (size_t)n <= rec_cap) {
			memcpy(rec + rec_len, buf, n * 2);
			for (snd_pcm_sframes_t i = 0; i < n; i++)
				rec_time[rec_len + i] = t - (int64_t)(delay + n - i) * 1000000000LL / RATE;
			rec_len += n;
		}
	}
	snd_pcm_drop(mic);
	return NULL;
}

/* the time of the matched-filter peak near `expect` (±30 ms), or -1; *peak its value */
static int64_t find_click(int64_t expect, double *peak)
{
	double best = 0;
	int64_t best_t = -1;
	for (size_t i = 0; i + CLICK < rec_len; i++) {
		if (llabs(rec_time[i] - expect) > 30000000LL)
			continue;
		double c = 0;
		for (int k = 0; k < CLICK; k++)
			c += (double)rec[i + k] * click_wave[k];
		if (fabs(c) > best) {
			best = fabs(c);
			best_t = rec_time[i];
		}
	}
	*peak = best;
	return best_t;
}

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: roomcheck PLAYBACK_PCM CAPTURE_PCM ECHO_DELAY_MS [SECONDS]\n");
		return 64;
	}
	double delay_ms = atof(argv[3]);
	if (argc > 4)
		seconds = atof(argv[4]);
	for (int k = 0; k < CLICK; k++) {
		double w = 0.5 - 0.5 * cos(2 * M_PI * k / CLICK);
		click_wave[k] = (int16_t)(16000 * w * sin(2 * M_PI * 3000.0 * k / RATE));
	}
	rec_cap = (size_t)((seconds + 1) * RATE);
	rec = calloc(rec_cap, 2);
	rec_time = calloc(rec_cap, sizeof(int64_t));
	spk = open_pcm(argv[1], SND_PCM_STREAM_PLAYBACK);
	mic = open_pcm(argv[2], SND_PCM_STREAM_CAPTURE);
	pthread_t a, b;
	pthread_create(&b, NULL, microphone, NULL);
	pthread_create(&a, NULL, speaker, NULL);
	pthread_join(a, NULL);
	pthread_join(b, NULL);

	/* 1. delay contract */
	double worst = 0, sum = 0, self = 0;
	int found = 0;
	double p0 = 0;
	for (int k = 0; k < CLICK; k++) p0 += (double)click_wave[k] * click_wave[k];
	for (int i = 0; i < nclicks; i++) {
		double peak;
		int64_t t = find_click(click_heard[i] + (int64_t)(delay_ms * 1e6), &peak);
		if (t < 0 || peak < p0 * 0.01)
			continue;
		double err = (t - click_heard[i]) / 1e6 - delay_ms;
		sum += err;
		if (fabs(err) > fabs(worst)) worst = err;
		found++;
	}
	/* 3. the flushed click */
	double flushed_peak = 0;
	if (flushed_click_heard > 0)
		find_click(flushed_click_heard + (int64_t)(delay_ms * 1e6), &flushed_peak);
	double noise_peak = 0;
	find_click(cap_start_ns + 100000000LL, &noise_peak); /* before any click: the floor */
	self = flushed_peak / p0;
	/* 4. clock */
	double elapsed = (cap_end_ns - cap_start_ns) / 1e9;
	double clock_err = cap_frames - elapsed * RATE;

	int ok_delay = found >= nclicks * 8 / 10 && nclicks >= 4 && fabs(worst) <= 0.25;
	int ok_underrun = underrun_seen && underrun_recovered;
	int ok_flush = flushed_click_heard > 0 && self < 0.05;
	int ok_clock = fabs(clock_err) <= 2 * PERIOD;
	printf("{\"clicks\":%d,\"echoes_found\":%d,\"mean_error_ms\":%.4f,\"worst_error_ms\":%.4f,"
	       "\"underrun_reported\":%s,\"underrun_recovered\":%s,\"flushed_click_echo_ratio\":%.4f,"
	       "\"captured_frames\":%lld,\"clock_error_frames\":%.1f,\"ok\":%s}\n",
	       nclicks, found, found ? sum / found : 0, worst, underrun_seen ? "true" : "false",
	       underrun_recovered ? "true" : "false", self, (long long)cap_frames, clock_err,
	       ok_delay && ok_underrun && ok_flush && ok_clock ? "true" : "false");
	snd_pcm_close(spk);
	snd_pcm_close(mic);
	if (!ok_delay) fprintf(stderr, "roomcheck: FAIL delay contract\n");
	if (!ok_underrun) fprintf(stderr, "roomcheck: FAIL underrun not reported/recovered\n");
	if (!ok_flush) fprintf(stderr, "roomcheck: FAIL a flushed click was heard\n");
	if (!ok_clock) fprintf(stderr, "roomcheck: FAIL capture clock\n");
	return ok_delay && ok_underrun && ok_flush && ok_clock ? 0 : 1;
}
