/* mixprec/mixprec.h: umbrella header for libmixprec. */
#ifndef MIXPREC_MIXPREC_H
#define MIXPREC_MIXPREC_H

#include <mixprec/api.h> /* MXP_API, MIXPREC_VERSION_*, MIXPREC_ABI_VERSION */
#include <mixprec/base.h>
#include <mixprec/num.h>
#include <mixprec/amp.h>
#include <mixprec/model.h>
#include <mixprec/train.h>
#include <mixprec/data.h>
#include <mixprec/dataset.h>
#include <mixprec/predict.h>
#include <mixprec/config.h>
#include <mixprec/guard.h>
#include <mixprec/ckpt.h>
#include <mixprec/dist.h>
#include <mixprec/world_model.h>
#include <mixprec/classifier.h>
#include <mixprec/gpt.h>
#include <mixprec/obs.h>
#include <mixprec/device.h>
#include <mixprec/run.h>

#endif /* MIXPREC_MIXPREC_H */
