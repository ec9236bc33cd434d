// WebRTC legacy AEC / AECM (webrtc-audio-processing 0.3) over raw 16 kHz int16 files,
// 10 ms frames, delay-agnostic with the extended filter (the delay is unknown, as for
// Linnet). Used by bench/aec-compare/run.py only.
#include <webrtc/modules/audio_processing/include/audio_processing.h>
#include <webrtc/modules/interface/module_common_types.h>
#include <cstdio>
#include <vector>
#include <cstdlib>
using namespace webrtc;
int main(int argc, char** argv) {
  // usage: h mic.raw ref.raw out.raw level(0-2) mobile(0/1)
  FILE* fm = fopen(argv[1], "rb"); FILE* fr = fopen(argv[2], "rb"); FILE* fo = fopen(argv[3], "wb");
  int level = atoi(argv[4]); int mobile = atoi(argv[5]);
  Config cfg; cfg.Set<ExtendedFilter>(new ExtendedFilter(true)); cfg.Set<DelayAgnostic>(new DelayAgnostic(true));
  AudioProcessing* apm = AudioProcessing::Create(cfg);
  if (mobile) { apm->echo_control_mobile()->Enable(true); apm->echo_control_mobile()->set_routing_mode(EchoControlMobile::kSpeakerphone); }
  else { apm->echo_cancellation()->Enable(true); apm->echo_cancellation()->set_suppression_level((EchoCancellation::SuppressionLevel)level); apm->echo_cancellation()->enable_drift_compensation(false); }
  AudioFrame f, r; const int N = 160;
  std::vector<int16_t> m(N), rr(N);
  while (fread(m.data(), 2, N, fm) == N && fread(rr.data(), 2, N, fr) == N) {
    r.sample_rate_hz_ = 16000; r.num_channels_ = 1; r.samples_per_channel_ = N; for (int i=0;i<N;i++) r.data_[i] = rr[i];
    f.sample_rate_hz_ = 16000; f.num_channels_ = 1; f.samples_per_channel_ = N; for (int i=0;i<N;i++) f.data_[i] = m[i];
    apm->ProcessReverseStream(&r);
    apm->set_stream_delay_ms(0);
    apm->ProcessStream(&f);
    fwrite(f.data_, 2, N, fo);
  }
  fclose(fo); return 0;
}
